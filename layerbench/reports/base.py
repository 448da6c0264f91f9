"""What every report shows, gathered once from the store; and the format registry."""

from dataclasses import dataclass, field
from functools import cached_property, partial

import numpy as np

from layerbench import stats
from layerbench.analysis import decompose, drift, explain
from layerbench.core import metrics
from layerbench.core.runs import RunRecord, known
from layerbench.core.sizes import format_size
from layerbench.observe import fsstate, sentinel
from layerbench.observe.host import memory_summary
from layerbench.reports import host_state
from layerbench.reports.readers import READERS
from layerbench.stats import adaptive, marginal, sequential
from layerbench.store import ExperimentRecord, HostRecord, SampleRecord, Store
from layerbench.workloads.base import LatencyCdf, Workload, WorkloadOptions
from layerbench.workloads.base import load_kinds as load_workload_kinds


@dataclass
class ReportData:
    experiment: ExperimentRecord
    runs: list[RunRecord]
    summaries: list[stats.Summary]
    warnings: list[str]
    stacks: list[str]
    workloads: list[str]
    samples: dict[int, list[SampleRecord]] = field(default_factory=dict)  # run id -> series
    sentinels: list[sentinel.Sample] = field(default_factory=list)  # the drift probes, in order
    marginals: list[marginal.Marginal] = field(default_factory=list)  # what each layer adds
    # An experiment of a fleet: each host's elapsed-time ratio per (stack, workload), by host.
    fleet_ratios: dict[str, dict[tuple[str, str], str]] = field(default_factory=dict)

    def fleet_table(self) -> tuple[list[str], list[list[str]]]:
        """stack, workload, then each host's ratio against its own baseline, side by side."""
        hosts = list(self.fleet_ratios)
        rows = [
            [stack, workload, *(self.fleet_ratios[h].get((stack, workload), "-") for h in hosts)]
            for workload in self.workloads
            for stack in self.stacks
        ]
        return ["stack", "workload", *hosts], rows

    @property
    def sweeps(self) -> dict[str, list[str]]:
        """Each sweep's stacks, by the stack it was written as (in the plan's order)."""
        groups: dict[str, list[str]] = {}
        for stack, point in self.experiment.plan.sweeps.items():
            groups.setdefault(point.group, []).append(stack)
        return groups

    def sweep_values(self, stack: str) -> dict[str, object]:
        return self.experiment.plan.sweep_values(stack)

    def sweep_lines(self, workload: str) -> list[str]:
        """Per sweep: each value's elapsed-time ratio against the baseline, side by side."""
        lines = []
        for group, stacks in self.sweeps.items():
            points = []
            for stack in stacks:
                values = ",".join(str(v) for v in self.sweep_values(stack).values())
                points.append(f"{values} {fmt_ratio(self.summary(stack, workload, 'wall_s'))}")
            swept = ", ".join(self.sweep_values(stacks[0]))
            lines.append(f"{group} over {swept}: " + "; ".join(points))
        return lines

    def marginals_of(self, workload: str, metric: str = "wall_s") -> list[marginal.Marginal]:
        return [m for m in self.marginals if (m.row.workload, m.row.metric) == (workload, metric)]

    def marginal_lines(self, workload: str) -> list[str]:
        """Per incremental step: what its top layer adds, then the stack against the baseline."""
        lines = []
        for step in self.marginals_of(workload):
            against = self.summary(step.stack, workload, "wall_s")
            lines.append(
                f"{step.stack}: +{step.layer} on {step.previous} {fmt_ratio(step.row)} {step.row.verdict}"
                + (f"; against {self.baseline} {fmt_ratio(against)}" if against is not None else "")
            )
        return lines

    @cached_property
    def measured(self) -> dict[tuple[str, str], list[RunRecord]]:
        """The runs the statistics keep, by (stack, workload): computed once per report."""
        return stats.measured(self.runs)

    @property
    def baseline(self) -> str:
        return str(self.experiment.baseline)

    def summary(self, stack: str, workload: str, metric: str) -> stats.Summary | None:
        for row in self.summaries:
            if (row.stack, row.workload, row.metric) == (stack, workload, metric):
                return row
        return None

    def median(self, stack: str, workload: str, metric: str) -> float | None:
        row = self.summary(stack, workload, metric)
        return row.median if row else None

    def failed_runs(self) -> list[RunRecord]:
        return [r for r in self.runs if r.status == "failed"]

    def unit(self, workload: str) -> str | None:
        return next((r.unit for r in self.runs if r.workload == workload and r.unit), None)

    def why_lines(self, workload: str) -> list[str]:
        """The "why" read-out for each stack that differs significantly (see analysis/explain.py)."""
        return explain.why_lines(self.summaries, self.baseline, self.stacks, workload, self.measured)

    def splits(self, workload: str) -> list[decompose.Split]:
        """Each stack's median elapsed time, part by part (see analysis/decompose.py), where the host
        measured the kernel's parts."""
        found = [decompose.split(self.summaries, stack, workload) for stack in self.stacks]
        kernel = decompose.KERNEL_METRICS
        return [s for s in found if s is not None and any(s.parts.get(k) is not None for k in kernel)]

    def split_lines(self, workload: str) -> list[str]:
        return [f"{split.stack}: {split.text()}" for split in self.splits(workload)]

    def helper_cpu(self, workload: str) -> dict[str, float]:
        """Median CPU seconds of each stack's helper processes, where it has any."""
        found = {stack: self.median(stack, workload, "helper_cpu_s") for stack in self.stacks}
        return {stack: value for stack, value in found.items() if value}

    def medians_of_runs(self, stack: str, workload: str) -> dict[str, float]:
        """Per-counter medians over the measured runs (for the table's counter columns)."""
        group = self.measured.get((stack, workload), [])
        keys = metrics.column_names()
        return {k: float(np.median(known(group, k) or [0])) for k in keys} if group else {}

    def median_run(self, stack: str, workload: str) -> RunRecord | None:
        """The measured run with the median elapsed time (the lower one of an even count):
        one real run whose counters belong together, for the csh `time` line."""
        group = sorted(self.measured.get((stack, workload), []), key=lambda r: r.wall_s)
        return group[(len(group) - 1) // 2] if group else None

    def design_note(self) -> str | None:
        return stats.design_note(self.summaries)

    def host_state_lines(self) -> list[str]:
        """Where the experiment's time went, the settle wait and the drift sentinel, a line
        each where they ran."""
        lines = [
            host_state.time_share_line(self.experiment, self.runs),
            host_state.settle_line(self.runs),
            host_state.sentinel_line(self.experiment, self.sentinels),
        ]
        return [line for line in lines if line]


def gather(store: Store, experiment_id: int) -> ReportData:
    experiment = store.experiment(experiment_id)
    runs = store.runs(experiment_id)
    plan = experiment.plan
    stacks = list(plan.stacks)
    workloads = list(plan.workloads)
    design = stats.Design.of_plan(plan)
    facts = experiment.facts
    rows = sequential.summaries(runs, facts, experiment.baseline, stacks, workloads, design)
    warnings = list(experiment.warnings) + stats.warnings_for(rows, runs, experiment.baseline)
    data = ReportData(
        experiment,
        runs,
        rows,
        warnings,
        stacks,
        workloads,
        store.samples(experiment_id),
        store.sentinels(experiment_id),
        marginal.marginals(runs, plan.increments, workloads, design),
    )
    if experiment.fleet:
        data.fleet_ratios = _fleet_ratios(store, experiment.fleet)
    if moved := host_state.drift_warning(data.sentinels):
        data.warnings.append(
            moved + ": absolute times drifted with it; ratios taken in one round hold better"
        )
    if unsteady := drift.unsteady_sentence(data.sentinels):
        data.warnings.append(unsteady)
    data.warnings += adaptive.notes(facts) + sequential.notes(facts)
    data.warnings += [line for read in READERS for line in read(runs)]
    data.warnings += [n for w in workloads for n in workload_kind(data, w).notes(_runs_by_stack(data, w))]
    return data


def _fleet_ratios(store: Store, fleet: str) -> dict[str, dict[tuple[str, str], str]]:
    """Every host's wall-time ratios in one fleet, in the order of its hosts."""
    record = store.fleet(fleet)
    ratios = {}
    for host in record.hosts:
        member = record.experiments.get(host)
        if member is None:
            continue
        experiment = store.experiment(member.id)
        rows = sequential.experiment_rows(experiment, partial(store.runs, member.id))
        ratios[host] = {(r.stack, r.workload): fmt_ratio(r) for r in rows}
    return ratios


def workload_kind(data: ReportData, workload: str) -> type[Workload[WorkloadOptions]]:
    return load_workload_kinds()[data.experiment.plan.kind_of(workload)]


def _runs_by_stack(data: ReportData, workload: str) -> dict[str, list[RunRecord]]:
    return {
        stack: [r for r in data.runs if (r.stack, r.workload) == (stack, workload) and not r.warmup]
        for stack in data.stacks
    }


def latency_cdfs(data: ReportData, workload: str) -> list[LatencyCdf]:
    """The latency distributions the workload kind measured (fio), for CDF plots."""
    return workload_kind(data, workload).latency_cdfs(workload, _runs_by_stack(data, workload))


def details_table(data: ReportData, workload: str) -> tuple[list[str], list[list[str]]] | None:
    """The workload kind's own table (churn: cycles, latencies, leaks), if it has one."""
    return workload_kind(data, workload).details(_runs_by_stack(data, workload))


# ---- shared formatting -----------------------------------------------------------------


def csh_elapsed(seconds: float) -> str:
    """Elapsed time as tcsh prints it: m:ss.dd (6:04.13), or h:mm:ss from an hour on.
    Rounded first, so 59.996 s is 1:00.00 and 3599.996 s is 1:00:00, never 0:60.00."""
    hundredths = round(seconds * 100)
    if hundredths >= 360000:
        whole = round(seconds)
        return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
    minutes, rest = divmod(hundredths, 6000)
    return f"{minutes}:{rest // 100:02d}.{rest % 100:02d}"


CSH_COUNTERS = ("user_s", "sys_s", "wall_s", "cpu_pct", "maxrss_kb", "inblock", "oublock", "majflt")


def csh_time_line(run: RunRecord) -> str | None:
    """The csh `time` line: 176.257u 38.316s 6:04.13 58.9% 0+2353k 183+366io 76805pf+0w.

    The fields of one run: user, system, elapsed, CPU % ((user + system) / elapsed), then
    memory as `shared+unshared k`: Linux's rusage keeps no averages of those, so it reads
    0 + the peak resident size in KiB; then block input+output in 512-byte units, major
    page faults and swaps (0: Linux does not count them). None for a run stored without all
    of them (by an older layerbench)."""
    if not all(run.has(name) for name in CSH_COUNTERS):
        return None
    count = run.required
    return (
        f"{count('user_s'):.3f}u {count('sys_s'):.3f}s {csh_elapsed(run.wall_s)} "
        f"{count('cpu_pct'):.1f}% 0+{round(count('maxrss_kb'))}k "
        f"{round(count('inblock'))}+{round(count('oublock'))}io "
        f"{round(count('majflt'))}pf+0w"
    )


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f}s"
    if value >= 1:
        return f"{value:.2f}s"
    return f"{value * 1000:.0f}ms"


def fmt_level(level: float | None) -> str:
    if level is None:
        return "?"
    text = f"{level * 100:.1f}".rstrip("0").rstrip(".")
    return f"{text}%"


def _x(value: float, digits: int = 2) -> str:
    return "inf" if value == float("inf") else f"{value:.{digits}f}"


def fmt_ratio(row: stats.Summary | None) -> str:
    """The ratio with its interval and the level that interval (and the verdict) has."""
    if row is None or row.ratio is None:
        return "-"
    if row.decision == "baseline":
        return "1 (baseline)"
    if row.ratio_ci_low is None or row.ratio_ci_high is None:
        return f"x{_x(row.ratio)}"
    digits = 2
    while digits < 4 and _x(row.ratio_ci_low, digits) == _x(row.ratio_ci_high, digits):
        digits += 1  # a narrow interval keeps the digits that tell its ends apart
    interval = f"{_x(row.ratio_ci_low, digits)}-{_x(row.ratio_ci_high, digits)}"
    return f"x{_x(row.ratio, digits)} [{interval}, {fmt_level(row.ratio_ci_level)}]"


def fmt_median_ci(row: stats.Summary | None) -> str:
    """The median with its distribution-free interval; the level when it is not 95 %."""
    if row is None or row.median is None:
        return "-"
    level = row.ci_level or 0.0
    suffix = "" if level >= stats.CONFIDENCE else f", range {fmt_level(level)}" if row.n > 1 else ", 1 run"
    return f"{fmt_seconds(row.median)} [{fmt_seconds(row.ci_low)}-{fmt_seconds(row.ci_high)}{suffix}]"


def fmt_p(row: stats.Summary | None) -> str:
    if row is None or row.p_adjusted is None:
        return "-"
    return f"{row.p_adjusted:.3f}" if row.p_adjusted >= 0.001 else "<0.001"


def fmt_throughput(value: float | None, unit: str | None) -> str:
    if value is None:
        return "-"
    if unit == "bytes":
        return f"{format_size(value)}/s"
    if unit:
        return f"{value:,.0f} {unit}/s"
    return f"{value:,.1f}/s"


def fmt_count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def host_lines(host: HostRecord) -> list[str]:
    disks = (
        ", ".join(f"{d.name} ({d.model}, {d.scheduler}, {format_size(d.size_bytes)})" for d in host.disks)
        or "none found"
    )
    fs = host.scratch_fs
    return [
        f"CPU: {host.cpu_model} ({host.cpus} CPUs), memory {format_size(host.memory_bytes or 0)}",
        f"OS: {host.distribution}, {host.kernel} ({host.virtualization})",
        f"Disk: {disks}",
        f"Scratch: {host.scratch_root} on {fs.get('type')} {fs.get('source')} ({fs.get('options')})",
        *([f"Scratch file system (and loop images): {state}"] if (state := fsstate.summary(fs)) else []),
        *(
            [f"Memory behind the runs: {memory}"]
            if (memory := memory_summary(host.free_page_reporting_order, host.damon_schemes))
            else []
        ),
    ]
