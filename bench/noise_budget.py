#!/usr/bin/env python3
"""The noise budget of an experiment's workloads: how much of the run-to-run variance of
each workload's elapsed times goes with each per-run factor the harness records.

    python3 bench/noise_budget.py [--db layerbench.db] [--experiment ID]   # default: the latest

For each workload, the response is the log of each measured run's elapsed time less its
stack's mean (the stacks' own costs taken out: what is left is the noise the comparisons
must see through). Each factor is a figure stored with every run, read either before the
timed run started (a pre-run covariate: a comparison may be adjusted for it) or during it
(an outcome of the run: it says where the time went, never a correction). For each factor:
Spearman's rho with the response, its p-value, and rho squared (the share of the variance
that goes with it, alone); then the share the pre-run factors explain together (R² of a
least-squares fit on their ranks, with the F test's p-value). Prints Markdown."""

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import stored  # noqa: E402

from layerbench.core import metrics  # noqa: E402
from layerbench.core.facts import Fact  # noqa: E402
from layerbench.core.runs import RunRecord  # noqa: E402
from layerbench.executors.local import PHASE_TEARDOWN_S  # noqa: E402
from layerbench.observe import cpu_speed, kernelstats, noise, settle  # noqa: E402
from layerbench.observe.warm_memory import WARM_MEMORY_BYTES  # noqa: E402
from layerbench.store import ExperimentRecord  # noqa: E402


@dataclass(frozen=True)
class Factor:
    name: str
    when: str  # "before" the timed run, or "during" it
    read: Callable[[RunRecord], float | None]
    fact: Fact[float] | None = None  # the run fact it reads (declared in layerbench.core.facts)


def _fact(fact: Fact[float]) -> Callable[[RunRecord], float | None]:
    def read(run: RunRecord) -> float | None:
        return run.fact(fact)

    return read


def _of_fact(name: str, fact: Fact[float]) -> Factor:
    """A factor that is a run fact: before or during the run as the facts registry declares it."""
    return Factor(name, fact.when, _fact(fact), fact)


def _column(key: str) -> Callable[[RunRecord], float | None]:
    def read(run: RunRecord) -> float | None:
        value = run.value(key) if key in metrics.BY_NAME else getattr(run, key)
        return float(value) if isinstance(value, int | float) else None

    return read


# This script's own mark on each run: not a stored fact, so not declared.
PREVIOUS_TEARDOWN = Fact("previous_teardown_s", "before", "the previous trial's teardown", float)

FACTORS = (
    _of_fact("memory handed back to the hypervisor since the last run (KiB)",
             kernelstats.MEMORY_REPORTED_KIB_BEFORE_RUN),
    _of_fact("free memory (KiB)", kernelstats.MEM_FREE_KIB_BEFORE_RUN),
    _of_fact("memory held warm for the run (bytes)", WARM_MEMORY_BYTES),
    _of_fact("settle: seconds waited for quiet devices", settle.WAITED_S),
    _of_fact("settle: bytes written back while waiting", settle.WRITTEN_BYTES),
    _of_fact("settle: bytes discarded while waiting", settle.DISCARDED_BYTES),
    _of_fact("settle: kernel threads' CPU while waiting (s)", settle.KTHREAD_CPU_S),
    _of_fact("runnable tasks at the start", noise.RUNNABLE_AT_START),
    _of_fact("a fixed loop on the run's CPUs right before it (s)", cpu_speed.CPU_PROBE_S),
    _of_fact("load average (1 min)", noise.LOAD_1M),
    Factor("the trial's place in the experiment", "before", _column("trial")),
    Factor("the previous trial's teardown (s)", "before", _fact(PREVIOUS_TEARDOWN)),
    _of_fact("memory handed back during the run (KiB)", kernelstats.MEMORY_REPORTED_KIB_DURING_RUN),
    _of_fact("other processes' CPU (s)", noise.OTHERS_CPU_S),
    Factor("kernel threads' CPU (s)", "during", _column("kthread_cpu_s")),
    Factor("I/O stall of the run, PSI some (s)", "during", _column("psi_io_some_s")),
    Factor("CPU wait of the run, PSI some (s)", "during", _column("psi_cpu_some_s")),
    Factor("the run's system time (s)", "during", _column("sys_s")),
)  # fmt: skip


def _within_stacks(values: list[float], stacks: list[str]) -> np.ndarray:
    """Each value less its stack's mean: what varies from run to run, not between stacks."""
    means = {
        stack: float(np.mean([v for v, s in zip(values, stacks, strict=True) if s == stack]))
        for stack in set(stacks)
    }
    return np.array([v - means[s] for v, s in zip(values, stacks, strict=True)])


def _factor_values(factor: Factor, runs: list[RunRecord]) -> np.ndarray | None:
    """The factor within each stack, or None where a run lacks it or it never varies."""
    values = [factor.read(run) for run in runs]
    if any(v is None for v in values):
        return None
    within = _within_stacks([float(v) for v in values if v is not None], [run.stack for run in runs])
    return within if np.ptp(within) > 0 else None


def _joint(response: np.ndarray, columns: list[np.ndarray]) -> tuple[float, float, float]:
    """R² and adjusted R² of the response on the ranks of the columns, with the F test's p."""
    n, k = len(response), len(columns)
    if k == 0 or n <= k + 1:
        return math.nan, math.nan, math.nan
    design = np.column_stack([np.ones(n), *(scipy_stats.rankdata(c) for c in columns)])
    fitted = design @ np.linalg.lstsq(design, response, rcond=None)[0]
    total = float(np.sum((response - response.mean()) ** 2))
    r2 = 1 - float(np.sum((response - fitted) ** 2)) / total if total > 0 else math.nan
    adjusted = 1 - (1 - r2) * (n - 1) / (n - k - 1)
    f = (r2 / k) / ((1 - r2) / (n - k - 1)) if r2 < 1 else math.inf
    return r2, adjusted, float(scipy_stats.f.sf(f, k, n - k - 1))


def budget(runs: list[RunRecord], workload: str) -> list[str]:
    measured = [r for r in runs if r.workload == workload and r.measured]
    stacks = [run.stack for run in measured]
    response = _within_stacks([math.log(run.wall_s) for run in measured], stacks)
    lines = [
        f"### {workload}: {len(measured)} runs on {len(set(stacks))} stacks, the noise (SD of "
        f"the log elapsed time within a stack) {float(np.std(response, ddof=1)):.3f}",
        "",
        "| factor (within each stack) | read | Spearman rho | p | share of the variance (rho²) |",
        "|---|---|---|---|---|",
    ]
    before = []
    for factor in FACTORS:
        values = _factor_values(factor, measured)
        if values is None or len(values) < 5:
            lines.append(f"| {factor.name} | {factor.when} | - | - | (not recorded, or constant) |")
            continue
        if factor.when == "before":
            before.append(values)
        rho, p = scipy_stats.spearmanr(values, response)
        lines.append(f"| {factor.name} | {factor.when} | {rho:+.2f} | {p:.2g} | {rho * rho:.0%} |")
    r2, adjusted, p = _joint(response, before)
    lines += [
        "",
        f"The {len(before)} pre-run factors that vary, together (their ranks, least squares): "
        f"R² {r2:.0%}, adjusted {adjusted:.0%}, F test p {p:.2g}.",
    ]
    return lines


def show(db: str, experiment: ExperimentRecord, runs: list[RunRecord]) -> str:
    previous_teardown = None
    marked = []
    for run in runs:  # the trial before in the experiment's order: what it left to delete
        marked.append(replace(run, facts={**run.facts, PREVIOUS_TEARDOWN.key: previous_teardown}))
        previous_teardown = run.fact(PHASE_TEARDOWN_S)
    workloads = list(dict.fromkeys(run.workload for run in marked))
    parts = [f"Noise budget of experiment {experiment.id} ({db})\n"]
    parts += ["\n".join(budget(marked, workload)) + "\n" for workload in workloads]
    return "\n".join(parts)


if __name__ == "__main__":
    raise SystemExit(stored.main(__doc__ or "", "layerbench.db", show))
