"""The "why" read-out: for a stack whose elapsed time differs significantly from the
baseline's, the counters that moved most and one plain reading derived from them.

The rules, applied to the per-metric summaries of the stack against the baseline (each
metric's comparisons corrected as one family, see stats):

1. Only a stack whose `wall_s` verdict is `slower` or `faster` gets a line; it starts
   with the elapsed ratio and its interval.
2. A counter has *moved* when its comparison is significant after the correction, its
   estimated ratio is outside 0.8-1.25 (or it rose from 0), and its median changed by a
   material amount: at least MATERIAL[metric] (10 page faults or context switches, 1 MiB
   of I/O ...) and, for user and system time, at least a tenth of the elapsed difference
   (0.02 s more user time cannot explain 1.6 s more elapsed). The three that moved most
   (by the size of the ratio, either way) are listed, each with its ratio and interval,
   and so is every other moved counter a reading below is made from: a reading always
   names a counter the line prints.
3. Readings, each from one moved counter, and only those that explain the direction of
   the elapsed difference (a slower stack is read by what rose, a faster one by what fell):
   - CPU % down, slower, a helper daemon busy -> "work moved to a helper daemon"
   - CPU % down, slower -> "waiting, not computing (I/O or locks)"
   - CPU % down, faster -> "CPU time fell even more than elapsed"
   - CPU % up           -> "busier CPU (less waiting)"
   - system time up / down -> "kernel work" / "less kernel work"
   - major page faults up / down -> "pages of programs and mapped files read back in" /
     "fewer pages read back in" (after a cache drop most major faults are the program's
     own pages mapped back in, not data cache misses)
   - voluntary context switches up / down -> "round trips to a daemon or device" / "fewer round trips"
   - user time up / down -> "more computing in the workload itself" / "less computing in the workload"
4. Helper processes (a FUSE daemon) work outside the workload's counters: their median
   CPU time is always shown when it is above zero, and CPU % is read together with it: a
   slower stack whose CPU % fell while its helper used at least a tenth of the elapsed
   difference handed work to the helper rather than waiting.
5. If no counter moved: "no counter explains it".
6. Before the counters, the split of analysis/decompose.py: the elapsed difference, the parts of it
   that are named by its rule (significant, same direction, at least a tenth of it) with
   what is left unattributed, the bottom disk's busy share against the baseline's and the
   write amplification down the stack's devices; the part that grew the most gives the
   first reading ("the disk behind the stack (vda) was the bottleneck" when it is the I/O
   stall and that disk was at least 80 % busy).
"""

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from layerbench.analysis import decompose
from layerbench.core import metrics
from layerbench.core.runs import RunRecord
from layerbench.stats import Summary

MOVED_RATIO = 1.25
MOST = 3
# A CPU time that moved by less than this share of the elapsed difference explains none of it.
SMALL_SHARE = 0.1
SECONDS = ("user_s", "sys_s")

LABELS = metrics.labels()
COUNTERS = tuple(k for k in LABELS if k != "cpu_pct")
# The least change of a median that can explain anything, per counter (rule 2).
MATERIAL = metrics.material()

WAITING = "waiting, not computing (I/O or locks)"
HANDED_OVER = "work moved to a helper daemon"
LESS_CPU = "CPU time fell even more than elapsed"
BUSIER = "busier CPU (less waiting)"
CPU_READINGS = (WAITING, HANDED_OVER, LESS_CPU, BUSIER)
READINGS_UP = {
    "sys_s": "kernel work",
    "majflt": "pages of programs and mapped files read back in",
    "nvcsw": "round trips to a daemon or device",
    "user_s": "more computing in the workload itself",
}
READINGS_DOWN = {
    "sys_s": "less kernel work",
    "majflt": "fewer pages read back in",
    "nvcsw": "fewer round trips to a daemon or device",
    "user_s": "less computing in the workload",
}


@dataclass
class Moved:
    metric: str
    base: float
    value: float
    ratio: float | None  # the comparison's estimate; None when the baseline's median is 0
    ci: tuple[float, float] | None

    @property
    def up(self) -> bool:
        return self.value > self.base

    @property
    def size(self) -> float:
        """How far it moved, either way (a rise from 0 counts as very far)."""
        if self.ratio is None or self.ratio <= 0:
            return math.inf
        return abs(math.log(self.ratio))

    def text(self) -> str:
        label = LABELS[self.metric]
        if self.ratio is None:
            return f"{label} {_number(self.base)} -> {_number(self.value)}"
        if self.value == 0:
            return f"{label} {_number(self.base)} -> 0"
        ci = f" [{_ratio(self.ci[0])}-{_ratio(self.ci[1])}]" if self.ci else ""
        return f"{label} x{_ratio(self.ratio)}{ci}"


@dataclass
class Why:
    stack: str
    workload: str
    elapsed: Summary
    cpu: tuple[float, float] | None = None  # baseline, stack medians when CPU % moved
    moved: list[Moved] = field(default_factory=list)
    readings: list[str] = field(default_factory=list)
    helper_cpu_s: float | None = None
    attribution: decompose.Attribution | None = None  # rule 6
    evidence: decompose.Evidence | None = None

    def line(self) -> str:
        parts = [f"elapsed x{_ratio(self.elapsed.ratio or 0)}"]
        if self.elapsed.ratio_ci_low is not None and self.elapsed.ratio_ci_high is not None:
            parts[0] += f" [{_ratio(self.elapsed.ratio_ci_low)}-{_ratio(self.elapsed.ratio_ci_high)}]"
        if self.attribution is not None:
            parts.append(self.attribution.text())
            if self.attribution.named and self.evidence is not None:
                parts += self.evidence.texts()
        if self.cpu:
            reading = next(r for r in self.readings if r in CPU_READINGS)
            parts.append(f"CPU {self.cpu[0]:.1f}% -> {self.cpu[1]:.1f}%: {reading}")
        parts += [m.text() for m in self.moved]
        named = {c.metric for c in self.attribution.named} if self.attribution else set()
        if self.helper_cpu_s and "helper_cpu_s" not in named:
            parts.append(f"helper processes {self.helper_cpu_s:.2f}s CPU outside the workload's counters")
        readings = [r for r in self.readings if r not in CPU_READINGS]
        if readings:
            parts.append("so: " + ", ".join(readings))
        elif not self.cpu and not self.moved:
            parts.append("no counter explains it")
        return f"{self.stack}: " + "; ".join(parts)


def _ratio(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def _moved(row: Summary | None, base: Summary | None) -> Moved | None:
    reference = decompose.reference(row, base)
    if row is None or reference is None or row.median is None:
        return None
    if not row.significant or abs(row.median - reference) < MATERIAL.get(row.metric, 0):
        return None
    if reference == 0 or row.ratio is None or not math.isfinite(row.ratio):
        return Moved(row.metric, reference, row.median, None, None) if row.median > reference else None
    if 1 / MOVED_RATIO < row.ratio < MOVED_RATIO:
        return None
    low, high = row.ratio_ci_low, row.ratio_ci_high
    ci = (low, high) if low is not None and high is not None and math.isfinite(high) else None
    return Moved(row.metric, reference, row.median, row.ratio, ci)


def why(
    summaries: Iterable[Summary],
    baseline: str,
    stack: str,
    workload: str,
    groups: dict[tuple[str, str], list[RunRecord]] | None = None,
) -> Why | None:
    """The read-out for stack against baseline under workload, or None if its elapsed
    time does not differ significantly. groups: the measured runs by (stack, workload), for
    the devices and kernel threads of rule 6."""
    summaries = list(summaries)
    rows = {(s.stack, s.metric): s for s in summaries if s.workload == workload}
    elapsed = rows.get((stack, "wall_s"))
    if stack == baseline or elapsed is None or elapsed.decision not in ("slower", "faster"):
        return None
    result = Why(stack, workload, elapsed)
    slower = elapsed.decision == "slower"
    base_elapsed = decompose.reference(elapsed, rows.get((baseline, "wall_s")))
    elapsed_change = abs((elapsed.median or 0) - base_elapsed) if base_elapsed is not None else 0
    groups = decompose.beside(groups or {}, baseline, stack, workload) if elapsed.paired else groups
    helper = rows.get((stack, "helper_cpu_s"))
    if helper is not None and helper.median:
        result.helper_cpu_s = helper.median
    # What a helper did beyond the baseline's own helper (two builds of one FUSE daemon both
    # have one): only that can have taken the workload's work over.
    base_helper = rows.get((baseline, "helper_cpu_s"))
    grown = (result.helper_cpu_s or 0) - ((base_helper.median or 0) if base_helper is not None else 0)
    cpu = _moved(rows.get((stack, "cpu_pct")), rows.get((baseline, "cpu_pct")))
    if cpu is not None and cpu.ratio is not None:
        result.cpu = (cpu.base, cpu.value)
        helped = grown >= SMALL_SHARE * elapsed_change > 0
        reading = BUSIER if cpu.up else (HANDED_OVER if helped else WAITING) if slower else LESS_CPU
        result.readings.append(reading)
    moved = [
        m
        for metric in COUNTERS
        if (m := _moved(rows.get((stack, metric)), rows.get((baseline, metric))))
        and not (metric in SECONDS and abs(m.value - m.base) < SMALL_SHARE * elapsed_change)
    ]
    moved.sort(key=lambda m: m.size, reverse=True)
    # A counter explains the difference only when it moved the same way as the elapsed time.
    explaining = READINGS_UP if slower else READINGS_DOWN
    readers = [m for m in moved if m.up == slower and m.metric in explaining]
    attribution = _attribution(summaries, baseline, stack, workload, groups)
    named = {c.metric for c in attribution.named} if attribution else set()
    moved = [m for m in moved if m.metric not in named]
    readers = [m for m in readers if m.metric not in named]
    result.moved = moved[:MOST] + [m for m in readers if m not in moved[:MOST]]
    result.readings += [explaining[m.metric] for m in readers]
    if attribution is not None:
        result.attribution = attribution
        proof = decompose.evidence(groups or {}, baseline, stack, workload)
        result.evidence = proof
        if attribution.top is not None:
            threads = decompose.grown_threads(groups or {}, baseline, stack, workload)
            # The split's reading comes first: it is the largest measured part.
            result.readings.insert(1 if result.cpu else 0, decompose.reading(attribution.top, proof, threads))
    return result


def _attribution(
    summaries: list[Summary],
    baseline: str,
    stack: str,
    workload: str,
    groups: dict[tuple[str, str], list[RunRecord]] | None,
) -> decompose.Attribution | None:
    """The split's attribution where the host measured the kernel's parts of it (runs
    stored before they were measured keep the counters' read-out alone)."""
    measured = any(
        s.workload == workload and s.stack == stack and s.metric in decompose.KERNEL_METRICS and s.n
        for s in summaries
    )
    return decompose.attribute(summaries, baseline, stack, workload, groups) if measured else None


def why_lines(
    summaries: list[Summary],
    baseline: str,
    stacks: list[str],
    workload: str,
    groups: dict[tuple[str, str], list[RunRecord]] | None = None,
) -> list[str]:
    """One line per stack that differs significantly, in the plan's order."""
    found = (why(summaries, baseline, stack, workload, groups) for stack in stacks)
    return [w.line() for w in found if w is not None]
