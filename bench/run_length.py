#!/usr/bin/env python3
"""How long a run should be: the same workload at several sizes, and how soon each size
would decide its comparisons, in seconds of experiment.

    python3 -m layerbench run bench/run-length.toml --db run-length.db --quiet
    python3 bench/run_length.py --db run-length.db [--experiment ID]   # default: the latest

A run's noise on a small VM is many small delays of its own: if they were independent, a
run five times longer would have a spread (the standard deviation of its log elapsed time)
about sqrt(5) smaller, and one long run would tell as much as five short ones; but each
trial also pays its untimed work (build, prepare, settle, teardown) once. For each workload
of the experiment (the plan runs one workload at several sizes) this prints each stack's
median, CV and log spread; the spread of the per-repetition log ratios against the baseline
(pairing helps only where neighbours in time share their noise); the verdict at the plan's
design and, where inconclusive, its "about N repetitions would decide it"; and what those N
would cost: N times the two stacks' medians (timed) plus N times their mean untimed time per
trial (from the runs' `phase_*_s` facts and settle wait). Prints Markdown."""

import math
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import stored  # noqa: E402

from layerbench import stats  # noqa: E402
from layerbench.core.runs import RunRecord  # noqa: E402
from layerbench.executors import local  # noqa: E402
from layerbench.store import ExperimentRecord  # noqa: E402

UNTIMED_FACTS = (
    local.PHASE_BUILD_S,
    local.PHASE_PREPARE_S,
    local.PHASE_WARM_MEMORY_S,
    local.PHASE_AROUND_RUN_S,
    local.PHASE_TEARDOWN_S,
)


def _untimed(runs: list[RunRecord]) -> float:
    """Mean seconds of a trial outside its timed run."""
    totals = [sum(r.fact(phase) or 0.0 for phase in UNTIMED_FACTS) for r in runs]
    return statistics.fmean(totals) if totals else math.nan


def _log_sd(values: list[float]) -> float:
    return statistics.stdev([math.log(v) for v in values]) if len(values) > 2 else math.nan


def _paired_sd(runs: list[RunRecord], base: list[RunRecord]) -> float:
    own = {r.rep: r.wall_s for r in runs}
    reference = {r.rep: r.wall_s for r in base}
    logs = [math.log(own[rep] / reference[rep]) for rep in sorted(own.keys() & reference.keys())]
    return statistics.stdev(logs) if len(logs) > 2 else math.nan


def rows(runs: list[RunRecord], baseline: str, design: stats.Design) -> list[str]:
    """The table's lines: one per (workload, stack other than the baseline)."""
    groups = stats.measured(runs)
    workloads = list(dict.fromkeys(r.workload for r in runs))
    stacks = list(dict.fromkeys(r.stack for r in runs))
    summaries = stats.summaries(runs, baseline, stacks, workloads, ["wall_s"], design=design)
    baseline_rows = {row.workload: row for row in summaries if row.stack == baseline}
    lines = []
    for row in summaries:
        if row.stack == baseline or not row.n:
            continue
        own, base = groups[(row.stack, row.workload)], groups[(baseline, row.workload)]
        walls = [r.wall_s for r in own]
        base_walls = [r.wall_s for r in base]
        median, base_median = statistics.median(walls), statistics.median(base_walls)
        untimed, base_untimed = _untimed(own), _untimed(base)
        per_rep = median + base_median + untimed + base_untimed
        if row.decision == "inconclusive" and row.reps_to_decide:
            need = f"{row.reps_to_decide} reps, {row.reps_to_decide * per_rep:.0f} s"
        else:
            need = "-"
        lines.append(
            f"| {row.workload} | {row.stack} | {base_median:.3f} s, {median:.3f} s "
            f"| {baseline_rows[row.workload].cv:.1%}, {row.cv:.1%} "
            f"| {_log_sd(base_walls):.3f}, {_log_sd(walls):.3f} | {_paired_sd(own, base):.3f} "
            f"| {base_untimed:.2f} s, {untimed:.2f} s "
            f"| x{row.ratio:.2f} [{row.ratio_ci_low:.2f}-{row.ratio_ci_high:.2f}] {row.decision} | {need} |"
        )
    return lines


def show(db: str, experiment: ExperimentRecord, runs: list[RunRecord]) -> str:
    design = stats.Design.of_plan(experiment.plan)
    return "\n".join(
        [
            f"Run length, experiment {experiment.id} ({db}), each stack against {experiment.baseline}\n",
            "| workload | stack | median (baseline, stack) | CV | log sd | paired log-ratio sd "
            "| untimed per trial | ratio [interval] verdict | to decide: reps, experiment time |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows(runs, experiment.baseline, design),
        ]
    )


if __name__ == "__main__":
    sys.exit(stored.main(__doc__ or "", "run-length.db", show))
