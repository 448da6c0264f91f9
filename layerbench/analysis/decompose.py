"""Where a stack's elapsed time went, and which part of it grew against the baseline.

The split (per stack and workload, from the medians of the measured runs):

- workload on CPU, user and system (its wait4 rusage);
- helper daemons on CPU (a FUSE daemon, qemu: `helper_cpu_s`);
- kernel threads on CPU (`kthread_cpu_s`: loop workers, jbd2, kworkers, flushers;
  system-wide, so on a busy host it includes others' work);
- stalled on I/O (`psi_io_some_s`: PSI `some`, time at least one task of the run waited for
  I/O; the run's own where it ran in its own cgroup v2 group, else system-wide);
- waiting for a CPU (`psi_cpu_some_s`, the same way);
- the rest: elapsed minus all of the above (sleeping on a daemon's reply, locks, what no
  counter sees). The parts can overlap (a CPU-parallel workload computes on two CPUs at
  once; a helper runs while the workload waits for it), so the rest can be negative: it is
  then printed as the overlap.

The attribution of an elapsed difference (the rule): each part's change is the difference of
its medians, stack minus baseline. A part is *named* when its own comparison with the
baseline is significant after the correction of its family (see stats) and its change goes
the same way as the elapsed difference and is material: at least SHARE (a tenth) of the
elapsed difference. A part the baseline does not have at all (0 in every one of its runs: no
helper daemon) and the stack has in every run counts as significant without a test: there is
no ratio to estimate. The named changes are printed with what is left as unattributed, so the
figures add up to the elapsed difference by construction.
"""

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from layerbench.core.runs import RunRecord, known
from layerbench.core.sizes import format_size
from layerbench.observe import measure
from layerbench.observe.measure import KERNEL
from layerbench.stats import Summary

SHARE = 0.1


@dataclass(frozen=True)
class Component:
    metric: str
    label: str  # in an attribution: "+0.31 s stalled on I/O (PSI)"
    short: str  # in the split line
    reading: str  # what it means when it is the part that grew the most


COMPONENTS = (
    Component("user_s", "workload on CPU (user)", "user", "more computing in the workload itself"),
    Component("sys_s", "workload on CPU (system)", "system", "kernel work in the workload's own calls"),
    Component("helper_cpu_s", "helper daemons on CPU", "helpers", "a helper daemon did the work"),
    Component("kthread_cpu_s", "kernel threads on CPU", "kernel threads", "kernel threads did the work"),
    Component("psi_io_some_s", "stalled on I/O (PSI)", "I/O stall", "waiting for I/O"),
    Component("psi_cpu_some_s", "waiting for a CPU (PSI)", "CPU wait", "waiting for a CPU"),
)
METRICS = tuple(c.metric for c in COMPONENTS)
KERNEL_METRICS = ("kthread_cpu_s", "psi_io_some_s", "psi_cpu_some_s")
BY_METRIC = {c.metric: c for c in COMPONENTS}
# A disk busier than this (its io_ticks share of the run) is read as the bottleneck.
SATURATED_PCT = 80.0


@dataclass
class Split:
    """One stack's median elapsed time, part by part (seconds; None: not measured here)."""

    stack: str
    elapsed: float
    parts: dict[str, float | None]

    @property
    def rest(self) -> float:
        return self.elapsed - sum(v for v in self.parts.values() if v is not None)

    def text(self) -> str:
        shown = [
            f"{BY_METRIC[m].short} {_seconds(v)} ({_share(v, self.elapsed)})"
            for m, v in self.parts.items()
            if v is not None
        ]
        rest = self.rest
        tail = (
            f"rest {_seconds(rest)} ({_share(rest, self.elapsed)})"
            if rest >= 0
            else f"parts overlap by {_seconds(-rest)}"
        )
        return f"{_seconds(self.elapsed)} = " + ", ".join([*shown, tail])

    def as_dict(self) -> dict[str, Any]:
        return {"elapsed_s": self.elapsed, "parts_s": self.parts, "rest_s": self.rest}

    def bars(self) -> list[tuple[str, float]]:
        """The parts drawn as one stacked bar: workload CPU, helpers and kernel threads, I/O
        stall, CPU wait, the rest."""

        def total(*names: str) -> float:
            return sum(self.parts.get(n) or 0.0 for n in names)

        return [
            ("workload on CPU", total("user_s", "sys_s")),
            ("helpers and kernel threads on CPU", total("helper_cpu_s", "kthread_cpu_s")),
            ("stalled on I/O", total("psi_io_some_s")),
            ("waiting for a CPU", total("psi_cpu_some_s")),
            ("rest", self.rest),
        ]


@dataclass
class Change:
    metric: str
    base: float
    value: float
    ratio: float | None
    ci: tuple[float, float] | None

    @property
    def delta(self) -> float:
        return self.value - self.base

    def text(self) -> str:
        ci = f" [{self.ci[0]:.2f}-{self.ci[1]:.2f}]" if self.ci else ""
        ratio = f", x{self.ratio:.2f}{ci}" if self.ratio is not None and math.isfinite(self.ratio) else ""
        return f"{_signed(self.delta)} {BY_METRIC[self.metric].label}{ratio}"


@dataclass
class Attribution:
    """An elapsed difference against the baseline and the parts that explain it."""

    stack: str
    difference: float  # median elapsed, stack minus baseline
    named: list[Change] = field(default_factory=list)  # largest first

    @property
    def unattributed(self) -> float:
        return self.difference - sum(c.delta for c in self.named)

    @property
    def top(self) -> Change | None:
        return self.named[0] if self.named else None

    def text(self) -> str:
        if not self.named:
            return f"{_signed(self.difference)} elapsed: no part of the split explains it"
        named = ", ".join(c.text() for c in self.named)
        return f"{_signed(self.difference)} elapsed: {named}; {_signed(self.unattributed)} unattributed"

    def as_dict(self) -> dict[str, Any]:
        return {
            "difference_s": self.difference,
            "named": [
                {"metric": c.metric, "delta_s": c.delta, "ratio": c.ratio, "ratio_ci": c.ci}
                for c in self.named
            ],
            "unattributed_s": self.unattributed,
        }


def _rows(summaries: list[Summary], workload: str) -> dict[tuple[str, str], Summary]:
    return {(s.stack, s.metric): s for s in summaries if s.workload == workload}


def reference(row: Summary | None, base: Summary | None) -> float | None:
    """The baseline's median that row's median differs from: over the runs its comparison
    used (the baseline's own row for rows stored before they said)."""
    if row is not None and row.reference_median is not None:
        return row.reference_median
    return base.median if base is not None else None


def beside(
    groups: dict[tuple[str, str], list[RunRecord]], baseline: str, stack: str, workload: str
) -> dict[tuple[str, str], list[RunRecord]]:
    """groups with the baseline's runs of workload cut to the repetitions stack has: the runs
    a paired comparison measured side by side (a budget gives undecided stacks more rounds)."""
    reps = {r.rep for r in groups.get((stack, workload), [])}
    cut = [r for r in groups.get((baseline, workload), []) if r.rep in reps]
    return {**groups, (baseline, workload): cut}


def split(summaries: list[Summary], stack: str, workload: str) -> Split | None:
    rows = _rows(summaries, workload)
    elapsed = rows.get((stack, "wall_s"))
    if elapsed is None or elapsed.median is None:
        return None
    parts = {m: (row.median if (row := rows.get((stack, m))) is not None else None) for m in METRICS}
    return Split(stack, elapsed.median, parts)


def _absent_then_present(
    groups: dict[tuple[str, str], list[RunRecord]], baseline: str, stack: str, workload: str, metric: str
) -> bool:
    base = [r.value(metric) for r in groups.get((baseline, workload), [])]
    mine = [r.value(metric) for r in groups.get((stack, workload), [])]
    return bool(base and mine) and all(v == 0 for v in base) and all(v is not None and v > 0 for v in mine)


def attribute(
    summaries: list[Summary],
    baseline: str,
    stack: str,
    workload: str,
    groups: dict[tuple[str, str], list[RunRecord]] | None = None,
) -> Attribution | None:
    """The named parts of stack's elapsed difference from the baseline (see the rule above).
    groups: the measured runs by (stack, workload), for the parts the baseline lacks."""
    rows = _rows(summaries, workload)
    mine = rows.get((stack, "wall_s"))
    theirs = reference(mine, rows.get((baseline, "wall_s")))
    if stack == baseline or mine is None or theirs is None or mine.median is None:
        return None
    difference = mine.median - theirs
    result = Attribution(stack, difference)
    for metric in METRICS:
        row = rows.get((stack, metric))
        base = reference(row, rows.get((baseline, metric)))
        if row is None or base is None or row.median is None:
            continue
        if not row.significant and not _absent_then_present(groups or {}, baseline, stack, workload, metric):
            continue
        delta = row.median - base
        if delta * difference <= 0 or abs(delta) < SHARE * abs(difference):
            continue
        low, high = row.ratio_ci_low, row.ratio_ci_high
        ci = (low, high) if low is not None and high is not None and math.isfinite(high) else None
        ratio = row.ratio if row.ratio is not None and math.isfinite(row.ratio) else None
        result.named.append(Change(metric, base, row.median, ratio, ci if ratio is not None else None))
    result.named.sort(key=lambda c: abs(c.delta), reverse=True)
    return result


@dataclass
class Evidence:
    """What the devices of a stack did, for the why line beside the top part."""

    bottom: str | None = None  # the disk at the bottom of the stack
    busy: tuple[float, float] | None = None  # baseline, stack median disk busy %
    through: list[str] = field(default_factory=list)  # the devices above the bottom
    amplification: float | None = None  # bytes to the bottom device / bytes the workload wrote

    def texts(self) -> list[str]:
        found = []
        if self.bottom and self.busy:
            found.append(f"{self.bottom} busy {self.busy[1]:.0f} % vs {self.busy[0]:.0f} %")
        if self.amplification is not None and self.bottom:
            via = f" through {', '.join(self.through)}" if self.through else ""
            found.append(f"writes x{self.amplification:.2f}{via} to {self.bottom}")
        return found


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def evidence(
    groups: dict[tuple[str, str], list[RunRecord]], baseline: str, stack: str, workload: str
) -> Evidence:
    runs, base_runs = groups.get((stack, workload), []), groups.get((baseline, workload), [])
    found = Evidence()
    chain = measure.device_chain(runs)
    if chain:
        found.bottom, found.through = chain[-1], chain[:-1]
    busy = _median(known(runs, "disk_busy_pct"))
    base_busy = _median(known(base_runs, "disk_busy_pct"))
    if busy is not None and base_busy is not None:
        found.busy = (base_busy, busy)
    found.amplification = _median(
        [
            written / r.units
            for r in runs
            if r.unit == "bytes" and r.units and (written := r.value("disk_write_bytes")) is not None
        ]
    )
    return found


def reading(top: Change, proof: Evidence, threads: list[str]) -> str:
    """Plain words for the part that grew the most."""
    component = BY_METRIC[top.metric]
    if top.metric == "psi_io_some_s" and proof.busy and proof.busy[1] >= SATURATED_PCT:
        return f"the disk behind the stack ({proof.bottom}) was the bottleneck"
    if top.metric == "kthread_cpu_s" and threads:
        return f"{component.reading} ({', '.join(threads)})"
    return component.reading


def grown_threads(
    groups: dict[tuple[str, str], list[RunRecord]],
    baseline: str,
    stack: str,
    workload: str,
    most: int = 2,
) -> list[str]:
    """The kernel-thread families whose median CPU grew the most against the baseline."""

    def medians(runs: list[RunRecord]) -> dict[str, float]:
        threads = [(r.fact(KERNEL) or {}).get("threads_cpu_s", {}) for r in runs]
        names = {n for of_run in threads for n in of_run}
        return {n: float(np.median([of_run.get(n, 0.0) for of_run in threads])) for n in names}

    mine = medians(groups.get((stack, workload), []))
    theirs = medians(groups.get((baseline, workload), []))
    grown = sorted(((v - theirs.get(n, 0.0), n) for n, v in mine.items()), reverse=True)
    return [f"{n} +{d:.2f} s" for d, n in grown[:most] if d > 0.005]


def flow(runs: list[RunRecord], direction: str = "write") -> tuple[float | None, list[tuple[str, float]]]:
    """(median bytes the workload moved in direction, [(device, median bytes it moved)], top
    first). The workload's bytes: fio's own count for that direction where it reports one;
    else, for writes, its work when counted in bytes; else unknown (None). A workload that
    counts its directions and moved nothing one way gives 0 there."""
    chain = measure.device_chain(runs)
    hops = []
    for device in chain or []:
        values = [r.devices[device][f"{direction}_bytes"] for r in runs if device in r.devices]
        if values:
            hops.append((device, float(np.median(values))))
    own = f"{direction}_io_bytes"
    if any(r.has(f"{other}_io_bytes") for r in runs for other in ("read", "write")):
        return float(np.median([r.value(own) or 0 for r in runs])), hops
    if direction != "write":
        return None, hops
    return _median([r.units for r in runs if r.unit == "bytes" and r.units]), hops


def flow_text(runs: list[RunRecord]) -> str | None:
    """`1.00 GiB written by the workload -> 1.02 GiB to loop0 -> 1.03 GiB to vda (x1.03)`:
    the medians over a stack's runs of what each device of the stack received."""
    written, hops = flow(runs)
    if not hops or written == 0:
        return None
    parts = [f"{format_size(int(written))} written by the workload"] if written else []
    parts += [f"{format_size(int(value))} to {device}" for device, value in hops]
    tail = f" (x{hops[-1][1] / written:.2f})" if written else ""
    return " -> ".join(parts) + tail


def layers_of_run(run: RunRecord) -> list[dict[str, Any]]:
    """A run's bytes per device of its stack, top first, each with its write amplification
    against what the workload wrote (when its work is counted in bytes)."""
    chain = measure.device_chain([run]) or []
    written = run.units if run.unit == "bytes" else None
    found = []
    for device in chain:
        counters = run.devices.get(device)
        if counters is None:
            continue
        found.append(
            {
                "device": device,
                "read_bytes": counters.get("read_bytes"),
                "write_bytes": counters.get("write_bytes"),
                "busy_ms": counters.get("busy_ms"),
                "write_amplification": counters["write_bytes"] / written if written else None,
            }
        )
    return found


def summary_extra(
    summaries: list[Summary],
    baseline: str,
    row: Summary,
    groups: dict[tuple[str, str], list[RunRecord]],
) -> dict[str, Any] | None:
    """The `decomposition` of an elapsed-time summary row: its split and, against the
    baseline, the attribution of its difference."""
    if row.metric != "wall_s":
        return None
    found = split(summaries, row.stack, row.workload)
    if found is None:
        return None
    attribution = attribute(summaries, baseline, row.stack, row.workload, groups)
    return {
        "split": found.as_dict(),
        "attribution": attribution.as_dict() if attribution is not None else None,
    }


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if abs(value) >= 0.1 else f"{value * 1000:.0f} ms"


def _signed(value: float) -> str:
    """+0.24 s, or +17 ms below a tenth of a second."""
    return f"{value:+.2f} s" if abs(value) >= 0.1 else f"{value * 1000:+.0f} ms"


def _share(value: float, whole: float) -> str:
    return f"{100 * value / whole:.0f} %" if whole > 0 else "-"
