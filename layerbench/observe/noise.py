"""Noise: what else the machine did while a run was timed, and which runs it disturbed.

Before and after each timed run we read the load average and the machine's busy CPU time
(/proc/stat). Other work is the machine's busy time minus the run's own (its rusage) and
its helper daemons'; it includes kernel threads, also those that serve the run (loop
workers, flushers), which is a few per cent for these workloads. (A scan of every process
would name the culprits, but costs tens of milliseconds of CPU right next to the timed
region, and that burst alone made a 1 ms run take 4 ms longer on a busy 2-CPU machine.)
A run during which other work used more than a quarter of the machine's CPU time is
flagged as disturbed; the figures are stored with every run (`facts`) and the reports
list the flagged runs."""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerbench.core.facts import Fact, declare
from layerbench.core.runs import DISTURBED, RERUN, RunRecord

LOAD_1M = Fact("load_1m", "before", "the one-minute load average as the run started", float)
RUNNABLE_AT_START = Fact("runnable_at_start", "before", "runnable threads as the run started", int)
OTHERS_CPU_S = Fact("others_cpu_s", "during", "CPU seconds other work took while the run was timed", float)
OTHERS_CPU_SHARE = Fact("others_cpu_share", "during", "that CPU as a share of all CPUs over the run", float)
declare(LOAD_1M, RUNNABLE_AT_START, OTHERS_CPU_S, OTHERS_CPU_SHARE)

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
DISTURBED_SHARE = 0.25  # of all CPUs, averaged over the run
_MIN_CPU_S = 0.05  # below this, a few clock ticks of a shell prompt are not a disturbance


@dataclass
class Snapshot:
    load_1m: float
    runnable: int
    busy_s: float  # the whole machine's non-idle CPU time since boot


def snapshot() -> Snapshot:
    """Cheap on purpose (two small files): it is taken right next to the timed region."""
    load = Path("/proc/loadavg").read_text().split()
    # cpu  user nice system idle iowait irq softirq steal guest guest_nice (guest is in user)
    jiffies = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(jiffies[i] for i in (0, 1, 2, 5, 6)) / _CLOCK_TICKS
    return Snapshot(float(load[0]), int(load[3].split("/")[0]), busy)


def judge(before: Snapshot, after: Snapshot, wall_s: float, own_cpu_s: float) -> dict[str, Any]:
    """The run's noise facts: load average, other work's CPU, and a verdict."""
    others = max(0.0, after.busy_s - before.busy_s - own_cpu_s)
    cpus = os.cpu_count() or 1
    share = others / (wall_s * cpus) if wall_s > 0 else 0.0
    return {
        LOAD_1M.key: before.load_1m,
        RUNNABLE_AT_START.key: before.runnable,
        OTHERS_CPU_S.key: round(others, 3),
        OTHERS_CPU_SHARE.key: round(share, 3),
        DISTURBED.key: share > DISTURBED_SHARE and others >= _MIN_CPU_S,
    }


def warnings(runs: list[RunRecord]) -> list[str]:
    """One line naming the runs other processes disturbed, for the reports."""
    # Imported here: the guest's agent imports this module to time its run, and numpy, which
    # the statistics bring, took seconds to import there (tcg, over 9p).
    from layerbench import stats

    hit = [r for r in runs if r.fact(DISTURBED)]
    if not hit:
        return []
    measured = [r for r in hit if not r.warmup]
    reruns = [r for r in runs if r.fact(RERUN)]
    # A repetition stayed disturbed when every run of it was.
    by_rep: dict[tuple[str, str, int], list[bool]] = {}
    for run in runs:
        if run.measured:
            key = (run.stack, run.workload, run.rep)
            by_rep.setdefault(key, []).append(stats.is_disturbed(run))
    stayed = sum(1 for flags in by_rep.values() if all(flags))
    groups = stats.measured(runs, disturbed=True)
    whole = [f"{s}/{w}" for (s, w), group in groups.items() if stats.mostly_disturbed(group)]
    shown = ", ".join(
        f"{r.stack}/{r.workload} rep {r.rep + 1}{' (warm-up)' if r.warmup else ''}"
        f" {r.fact(OTHERS_CPU_SHARE) or 0:.0%}"
        for r in hit[:8]
    )
    more = f" and {len(hit) - 8} more" if len(hit) > 8 else ""
    return [
        f"{len(hit)} run(s) disturbed: other work used more than {DISTURBED_SHARE:.0%} of "
        f"the CPU time while they ran: {shown}{more}. Disturbed runs are kept but left out of "
        f"the statistics; {len(reruns)} re-run(s) were made for {len(measured)} disturbed measured "
        f"run(s), and {stayed} repetition(s) stayed disturbed"
        + (
            f"; most runs of {', '.join(whole)} were flagged, so they were kept whole (the CPU "
            "seen as other work is most likely the stack's own kernel threads)"
            if whole
            else ""
        )
    ]
