"""What an experiment's report shows, in order, as one Document (reports/document.py) that
every human-facing format renders: the host, each workload's comparisons (its own headline
metrics first), why, where the time and the bytes went, the stacks, the test, the runs'
time series, failed runs, warnings and the plan."""

import dataclasses
import functools
import math
from typing import Any

import numpy as np

from layerbench import stats
from layerbench.analysis import decompose
from layerbench.core import metrics
from layerbench.core.sizes import format_size
from layerbench.observe import tracing
from layerbench.reports import host_state, plots
from layerbench.reports.base import (
    ReportData,
    csh_time_line,
    details_table,
    fmt_count,
    fmt_median_ci,
    fmt_p,
    fmt_ratio,
    fmt_seconds,
    fmt_throughput,
    host_lines,
    latency_cdfs,
    workload_kind,
)
from layerbench.reports.document import Cell, Document, Figure, Lines, Section, Table
from layerbench.store.records import SAMPLER

CSH_FIELDS = (
    "csh time fields, of one run: user, system, elapsed, CPU % = (user + system) / elapsed, "
    "0+peak RSS k (Linux keeps no shared/unshared memory averages), block in+out io in "
    "512-byte units, major page faults"
)


def document(data: ReportData) -> Document:
    experiment = data.experiment
    sections = [
        Section("Hardware/OS", [Lines(host_lines(experiment.host))]),
        *_fleet(data),
        _cost(data),
        *_sweeps(data),
    ]
    for workload in data.workloads:
        sections.append(Section(f"Workload {workload}", _workload_blocks(data, workload)))
    sections += [
        _host_during(data),
        _stacks(data),
        _test(data),
        _series(data),
        *_failed(data),
        Section("Warnings", [Lines(data.warnings or ["none"])]),
        Section("The plan", [Lines(experiment.plan_text.strip("\n").splitlines(), preformatted=True)]),
    ]
    return Document(
        f"layerbench experiment {experiment.id}: {experiment.name}",
        [
            f"Status {experiment.status}, started {experiment.started}, seed {experiment.seed}, "
            f"baseline {data.baseline}."
        ],
        sections,
    )


# ---- the comparisons -------------------------------------------------------------------


def ratio_points(data: ReportData, workload: str, metric: str = "wall_s") -> list[plots.RatioPoint]:
    points = []
    for stack in data.stacks:
        row = data.summary(stack, workload, metric)
        if row is None or row.ratio is None or not math.isfinite(row.ratio):
            points.append(plots.RatioPoint(stack, None, None, None, False))
            continue
        bounded = all(v is not None and math.isfinite(v) for v in (row.ratio_ci_low, row.ratio_ci_high))
        points.append(
            plots.RatioPoint(
                stack,
                row.ratio,
                row.ratio_ci_low if bounded else None,
                row.ratio_ci_high if bounded else None,
                significant=row.significant,
                is_baseline=row.decision == "baseline",
            )
        )
    return points


COST_TITLE = "Cost of each stack against the baseline"


def _cost(data: ReportData) -> Section:
    """The ratio plot and every run as a dot."""

    def walls(stack: str, workload: str, warmup: bool) -> list[float]:
        return [
            r.wall_s
            for r in data.runs
            if (r.stack, r.workload) == (stack, workload) and r.ok and bool(r.warmup) == warmup
        ]

    runs = {
        f"workload {w}": {s: (walls(s, w, False), walls(s, w, True)) for s in data.stacks}
        for w in data.workloads
    }
    lines = [
        "Ratio of elapsed times, stack / baseline, with its interval at the level its verdict was "
        "decided at; significant after the correction for many comparisons where it says slower or faster."
    ]
    if note := data.design_note():
        lines.append(note)
    spread = [r.wall_s for r in data.runs if r.ok]
    if spread:
        lines.append(
            f"{len(data.runs)} runs, elapsed times from {min(spread):.3f} s to {max(spread):.3f} s "
            f"(median {float(np.median(spread)):.3f} s)."
        )
    panels = {f"workload {w}": ratio_points(data, w) for w in data.workloads}
    return Section(
        COST_TITLE,
        [
            Lines(lines),
            Figure(
                "ratio-plot",
                "each stack's ratio with its interval",
                lambda: plots.ratio_figure(panels, xlabel=f"wall time ratio to {data.baseline}"),
            ),
            Figure("runs-plot", "every run", lambda: plots.runs_figure(runs, ylabel="wall time (s)")),
        ],
    )


def fmt_value(value: float | None, unit: str) -> str:
    """A metric's value in its unit: seconds, latencies in ns, rates, bytes."""
    if value is None:
        return "-"
    if unit == "s":
        return fmt_seconds(value)
    if unit == "ns":
        return f"{value / 1e6:.2f}ms" if value >= 1e6 else f"{value / 1e3:.0f}µs"
    if unit in ("bytes/s",):
        return f"{format_size(value)}/s"
    if unit == "bytes":
        return format_size(value)
    if unit == "ops/s":
        return f"{value:,.0f}/s"
    return f"{value:,.1f}"


def _median_ci(row: stats.Summary, unit: str) -> str:
    if unit == "s":
        return fmt_median_ci(row)
    if row.median is None:
        return "-"
    return f"{fmt_value(row.median, unit)} [{fmt_value(row.ci_low, unit)}-{fmt_value(row.ci_high, unit)}]"


def _reference_notes(data: ReportData, rows: list[stats.Summary], unit: str) -> list[str]:
    """Stacks given fewer rounds than the baseline (a budget spends rounds on the undecided
    ones) are compared with the baseline's runs of their own repetitions: that median, beside
    the baseline's row of every run, so that the table's two medians are not read as the ratio."""
    if not rows or (base := data.summary(data.baseline, rows[0].workload, rows[0].metric)) is None:
        return []
    fewer: dict[tuple[int, float], list[str]] = {}
    for row in rows:
        if row.paired and row.reference_median is not None and row.n < base.n:
            fewer.setdefault((row.n, row.reference_median), []).append(row.stack)
    every = f"all {base.n} {data.baseline} runs: {fmt_value(base.median, unit)}"
    return [
        f"{', '.join(stacks)}: {n} repetitions, against {data.baseline}'s runs of the same repetitions, "
        f"median {fmt_value(reference, unit)} ({every})"
        for (n, reference), stacks in fewer.items()
    ]


def comparison_table(data: ReportData, workload: str, metric: str) -> Table | None:
    """One metric of one workload, each stack against the baseline: a row to a line, the
    verdict a word; what a word leaves out (an interval too wide, the bound) is a note."""
    known = metrics.BY_NAME[metric]
    rows: list[list[Cell]] = []
    notes = []
    compared = []
    for stack in data.stacks:
        row = data.summary(stack, workload, metric)
        if row is None or row.n == 0:
            if metric == "wall_s":
                rows.append(
                    [Cell(stack), Cell("-"), Cell("-"), Cell("no successful runs"), Cell("-"), Cell("0")]
                )
            continue
        rows.append(
            [
                Cell(stack),
                Cell(_median_ci(row, known.unit), row.median),
                Cell(fmt_ratio(row), row.ratio),
                Cell(row.decision, style=row.decision),
                Cell(fmt_p(row), row.p_adjusted),
                Cell(str(row.n), row.n),
            ]
        )
        if row.verdict != row.decision:
            notes.append(f"{stack}: {row.verdict}")
        compared.append(row)
    if not rows:
        return None
    notes += _reference_notes(data, compared, known.unit)
    label = "elapsed time" if metric == "wall_s" else known.label
    return Table(
        ["stack", f"{label} (median) [95% CI]", "ratio [CI, level]", "verdict", "p adj.", "n"],
        rows,
        title=f"{label}, against {data.baseline}",
        notes=notes,
        left=(0, 3),
    )


def counters_table(data: ReportData, workload: str) -> Table:
    unit = data.unit(workload)
    rows = []
    for stack in data.stacks:
        medians = data.medians_of_runs(stack, workload)
        if not medians:
            continue
        rows.append(
            [
                Cell(stack),
                Cell(f"{medians['cpu_pct']:.1f}", medians["cpu_pct"]),
                Cell(f"{fmt_count(medians['majflt'])}/{fmt_count(medians['minflt'])}"),
                Cell(f"{fmt_count(medians['inblock'])}+{fmt_count(medians['oublock'])}"),
                Cell(fmt_throughput(data.median(stack, workload, "throughput"), unit)),
                Cell(fmt_seconds(medians["helper_cpu_s"]) if medians["helper_cpu_s"] else "-"),
            ]
        )
    return Table(
        ["stack", "CPU %", "faults maj/min", "block in+out", "throughput", "helper CPU"],
        rows,
        title="counters (medians of the measured runs)",
        notes=[
            "helper CPU: the CPU time of the stack's helper processes (FUSE, ssh daemons, qemu), "
            "not in the elapsed time's CPU %"
        ]
        if any(row[5].text != "-" for row in rows)
        else [],
    )


def _numbers(data: ReportData, workload: str) -> Lines:
    """The csh `time` line of each stack's run with the median elapsed time."""
    width = max(len(s) for s in data.stacks) + 1
    lines, chosen = [], []
    for stack in data.stacks:
        run = data.median_run(stack, workload)
        if run is None:
            shown = "no successful runs"
        else:
            shown = csh_time_line(run) or (
                "its counters were not all recorded (a run stored by a layerbench without them)"
            )
        lines.append(f"{stack + ':':<{width}} {shown}")
        if run:
            chosen.append(f"{stack} rep {run.rep + 1}")
    if chosen:
        lines.append(f"(the runs shown: {', '.join(chosen)}; {CSH_FIELDS})")
    return Lines(lines, "Numbers (the run with the median elapsed time of each stack)", preformatted=True)


def flow_tables(data: ReportData, workload: str) -> list[Table]:
    """Bytes down the stack (written) and up it (read), where the workload moved bytes that
    way: what the workload moved, what each device of the stack did, the amplification."""
    tables = []
    for direction, words, arrow in (("write", "written, down", "→"), ("read", "read, up", "←")):
        rows = []
        for stack in data.stacks:
            moved, hops = decompose.flow(data.measured.get((stack, workload), []), direction)
            # Reads only where the workload counts them (fio); writes also where it does not
            # count its bytes (a metadata run's bytes reach the devices all the same).
            if hops and (moved > 0 if moved is not None else direction == "write"):
                rows.append(
                    [
                        Cell(stack),
                        Cell(format_size(int(moved)) if moved else "-", moved),
                        Cell(
                            f" {arrow} ".join(f"{device} {format_size(int(value))}" for device, value in hops)
                        ),
                        Cell(f"x{hops[-1][1] / moved:.2f}" if moved else "-"),
                    ]
                )
        if rows:
            tables.append(
                Table(
                    ["stack", "by the workload", "each device, top first", "amplification"],
                    rows,
                    title=f"Bytes {words} the stack (median run)",
                )
            )
    return tables


def _workload_blocks(data: ReportData, workload: str) -> list[Any]:
    kind = workload_kind(data, workload)
    blocks: list[Any] = [
        table for metric in kind.headline_metrics if (table := comparison_table(data, workload, metric))
    ]
    blocks += [counters_table(data, workload), _numbers(data, workload)]
    if why := data.why_lines(workload):
        blocks.append(Lines(why, "Why"))
    if splits := data.splits(workload):
        blocks.append(
            Lines([f"{s.stack}: {s.text()}" for s in splits], "Where the elapsed time went (medians)")
        )
        blocks.append(
            Figure(
                f"split-{workload}",
                f"where the elapsed time went, {workload}",
                lambda: plots.split_figure([(s.stack, s.bars()) for s in splits]),
            )
        )
    blocks += flow_tables(data, workload)
    if sweeps := data.sweep_lines(workload):
        blocks.append(Lines(sweeps, "Sweeps (elapsed time against the baseline)"))
    if steps := data.marginals_of(workload):
        blocks.append(_marginal_table(data, workload, steps))
    if details := details_table(data, workload):
        blocks.append(Table(details[0], [[Cell(c) for c in row] for row in details[1]], title="Details"))
    if traced := tracing.stack_lines(data.measured, data.stacks, workload):
        title = "block-request latency, issue to completion (bpftrace)"
        blocks.append(
            Figure(f"block-latency-{workload}", title, lambda: plots.latency_cdf_figure(traced, title=title))
        )
    for cdf in latency_cdfs(data, workload):
        blocks.append(
            Figure(
                cdf.name, cdf.title, functools.partial(plots.latency_cdf_figure, cdf.lines, title=cdf.title)
            )
        )
    return blocks


def _marginal_table(data: ReportData, workload: str, steps: list[Any]) -> Table:
    rows = []
    notes = []
    for step in steps:
        rows.append(
            [
                Cell(step.stack),
                Cell(step.layer),
                Cell(step.previous),
                Cell(fmt_ratio(step.row), step.row.ratio),
                Cell(step.row.decision, style=step.row.decision),
                Cell(fmt_p(step.row), step.row.p_adjusted),
                Cell(fmt_ratio(data.summary(step.stack, workload, "wall_s"))),
            ]
        )
        if step.row.verdict != step.row.decision:
            notes.append(f"+{step.layer} on {step.previous}: {step.row.verdict}")
    return Table(
        ["stack", "adds", "on top of", "ratio [CI, level]", "verdict", "p adj.", f"against {data.baseline}"],
        rows,
        title="What each layer adds (elapsed time, stack / the stack one layer shorter: a family of its own)",
        notes=notes,
        left=(0, 1, 2, 4),
    )


# ---- the rest --------------------------------------------------------------------------


def _fleet(data: ReportData) -> list[Section]:
    if not data.fleet_ratios:
        return []
    header, rows = data.fleet_table()
    return [
        Section(
            f"The fleet {data.experiment.fleet}",
            [
                Table(
                    header,
                    [[Cell(c) for c in row] for row in rows],
                    title="elapsed time against the baseline, per host",
                )
            ],
        )
    ]


def _sweeps(data: ReportData) -> list[Section]:
    """Per sweep: each workload's ratio against the swept values."""
    sections = []
    for group, stacks in data.sweeps.items():
        values = [data.sweep_values(stack) for stack in stacks]
        labels = [",".join(str(v) for v in point.values()) for point in values]
        swept = ", ".join(values[0]) if values else ""
        panels = {}
        for workload in data.workloads:
            by_stack = {p.label: p for p in ratio_points(data, workload)}
            panels[f"workload {workload}"] = [
                dataclasses.replace(by_stack[stack], label=label)
                for label, stack in zip(labels, stacks, strict=True)
            ]
        sections.append(
            Section(
                f"Sweep {group} over {swept}",
                [
                    Lines(
                        [
                            line
                            for w in data.workloads
                            for line in data.sweep_lines(w)
                            if line.startswith(f"{group} ")
                        ]
                    ),
                    Figure(
                        f"sweep-{group}",
                        f"sweep {group}",
                        functools.partial(
                            plots.sweep_figure,
                            panels,
                            xlabel=swept,
                            ylabel=f"wall time ratio to {data.baseline}",
                        ),
                    ),
                ],
            )
        )
    return sections


def _host_during(data: ReportData) -> Section:
    """Where the time went, the settle wait before every trial, the drift sentinel."""
    blocks: list[Any] = [Lines(data.host_state_lines() or ["nothing recorded"])]
    if data.sentinels:
        series = host_state.sentinel_series({"": data.sentinels}, data.sentinels)
        blocks.append(
            Figure(
                "sentinel-plot",
                "the drift sentinel over the experiment",
                lambda: plots.sentinel_figure(
                    series, xlabel="minutes into the experiment", ylabel="time / the part's median"
                ),
            )
        )
    if rows := host_state.settle_rows(data.runs):
        blocks.append(
            Figure(
                "settle-plot",
                "the settle wait before each trial",
                lambda: plots.settle_figure(
                    [int(r[0]) for r in rows], [float(r[3]) for r in rows], [float(r[4]) for r in rows]
                ),
            )
        )
    return Section("The host during the experiment", blocks)


def _stacks(data: ReportData) -> Section:
    blocks: list[Any] = []
    for stack in data.stacks:
        info = data.experiment.stacks.get(stack)
        lines = [f"layers: {' → '.join(info.layers if info else ['?'])}"]
        if info and info.world:
            lines.append(f"world: {info.world}, chrooted into through the stack (jail/ro)")
        lines += (info.mount_lines if info else []) or ["(no mounts: a plain directory)"]
        blocks.append(Lines(lines, f"Config {stack}", preformatted=True))
    return Section("Stacks", blocks)


def _test(data: ReportData) -> Section:
    plan = data.experiment.plan
    lines = []
    for name, workload in plan.workloads.items():
        settings = ", ".join(
            f"{k}={v}"
            for k, v in workload.items()
            if k != "kind" and v not in (None, "", []) and not (k == "keep_stack" and v is False)
        )
        lines.append(f"{name}: {workload['kind']} ({settings})")
    lines.append(
        f"{plan.reps} measured runs per stack and workload after {plan.warmup} warm-up, "
        f"{plan.order} order, seed {data.experiment.seed}; caches dropped before each run "
        '(a build with caches = "warm" starts warm: written back, not dropped).'
    )
    return Section("Test", [Lines(lines)])


def sampler_note(data: ReportData) -> str:
    costs = [cost for r in data.runs if (cost := r.fact(SAMPLER))]
    if not costs:
        return "No time series were recorded for this experiment."
    cpu = sum(c["cpu_s"] for c in costs)
    wall = sum(c["wall_s"] for c in costs)
    worst = max(c["cpu_pct"] for c in costs)
    count = sum(c["count"] for c in costs)
    return (
        f"Sampled every {costs[0]['interval_s'] * 1000:.0f} ms from /proc/diskstats (the stack's top "
        f"device) and /proc/stat (all CPUs of the host): {count} samples in {len(costs)} runs. "
        f"The sampler used {cpu * 1000:.1f} ms of CPU over {wall:.1f} s of runs "
        f"({100 * cpu / wall if wall else 0:.2f} % of one CPU; at most {worst:.2f} % in one run)."
    )


def series_of(data: ReportData, stack: str, workload: str) -> plots.Series:
    """The measured run with the median wall time stands for its (stack, workload)."""
    run = data.median_run(stack, workload)
    if run is None:
        return plots.Series(f"{workload}: no successful run", [], [], [], [], [])
    samples = data.samples.get(run.id or 0, [])
    # Steps start at the beginning of each interval, so draw from t - dt.
    starts = [s.t_s - s.dt_s for s in samples]
    if samples:
        starts.append(samples[-1].t_s)

    def steps(values: list[float]) -> list[float]:
        return values + values[-1:]  # the last step holds to the end

    return plots.Series(
        f"{workload}: rep {run.rep + 1}, {run.wall_s:.2f} s (median run)",
        starts,
        steps([s.per_second(s.read_bytes) / 1e6 for s in samples]),
        steps([s.per_second(s.write_bytes) / 1e6 for s in samples]),
        steps([s.cpu_busy_pct or 0.0 for s in samples]),
        steps([s.cpu_iowait_pct or 0.0 for s in samples]),
    )


def _series(data: ReportData) -> Section:
    blocks: list[Any] = [Lines([sampler_note(data)])]
    for stack in data.stacks:
        blocks.append(
            Figure(
                f"series-{stack}",
                f"stack {stack}: I/O and CPU during its median run",
                functools.partial(
                    plots.timeseries_figure, [series_of(data, stack, w) for w in data.workloads]
                ),
            )
        )
    return Section("During the runs", blocks)


def _failed(data: ReportData) -> list[Section]:
    failed = data.failed_runs()
    if not failed:
        return []
    rows = [
        [
            Cell(r.stack),
            Cell(r.workload),
            Cell(f"{r.rep + 1}{' (warm-up)' if r.warmup else ''}"),
            Cell(r.error or ""),
        ]
        for r in failed
    ]
    return [Section("Failed runs", [Table(["stack", "workload", "rep", "error"], rows, left=(0, 1, 2, 3))])]
