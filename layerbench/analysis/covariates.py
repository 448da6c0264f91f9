"""What a noisy cell's runs had in common before they ran: pre-run covariates, each read
right before the timed run's clock starts (never during it: a figure read during the run
is an outcome of the run, and explaining by it would explain the run by itself).

A cell (stack x workload) whose elapsed times vary by more than NOISY_CV gets a note for
each covariate whose rank correlation with its times is significant (Spearman, p below
ALPHA, at least MIN_RUNS runs): the note names the covariate, the association and the
covariate's spread, so a reader sees a measured cause instead of "more repetitions would
help". A covariate is one entry of COVARIATES, read from the run's facts.
"""

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from layerbench.core.facts import JSON, Fact
from layerbench.core.runs import RunRecord
from layerbench.executors.local import INODE_GROUP_FREED_S_AGO
from layerbench.observe.cpu_speed import CPU_PROBE_S
from layerbench.observe.kernelstats import MEM_FREE_KIB_BEFORE_RUN, MEMORY_REPORTED_KIB_BEFORE_RUN

NOISY_CV = 0.10
ALPHA = 0.01
MIN_RUNS = 5


@dataclass(frozen=True)
class Covariate:
    fact: Fact[float]  # the run's fact that holds it
    words: str  # what it is, for the note
    unit: str  # "KiB" (shown in MiB), "ms" (stored in seconds) or "s"
    absent: float | None = None  # the value a null fact stands for (None: the run is left out)

    def value(self, facts: Mapping[str, JSON]) -> float | None:
        if self.fact.key not in facts:
            return None
        found = self.fact.read(facts)
        return found if found is not None else self.absent

    def spread(self, low: float, high: float) -> str:
        if self.unit == "KiB":
            return f"{low / 1024:.0f} to {high / 1024:.0f} MiB"
        if self.unit == "ms":
            return f"{1000 * low:.1f} to {1000 * high:.1f} ms"
        return f"{low:.0f} to {high:.0f} {self.unit}"


COVARIATES = (
    Covariate(
        MEMORY_REPORTED_KIB_BEFORE_RUN,
        "free memory handed back to the hypervisor since the last run (free page reporting: "
        "the run pays a host fault for each page of it it touches)",
        "KiB",
    ),
    Covariate(MEM_FREE_KIB_BEFORE_RUN, "free memory before the run", "KiB"),
    # ext4 without a journal skips the inodes freed in the last 60-360 s, one by one, for each
    # new inode (scratch/placement.py); a trial of this run ending near the run's group is read
    # from the placement's own bookkeeping, null beyond 365 s (counted as 365).
    Covariate(
        INODE_GROUP_FREED_S_AGO,
        "seconds since a trial ended near the inode group its files start in (ext4 without a "
        "journal skips each inode freed in the last 60-360 s)",
        "s",
        absent=365.0,
    ),
    # The hypervisor can slow a vCPU for seconds at a time without descheduling it
    # (observe/cpu_speed.py): a fixed loop timed on the run's CPUs just before it.
    Covariate(
        CPU_PROBE_S,
        "time a fixed loop took on the run's CPUs right before it (a slower CPU then)",
        "ms",
    ),
)


@dataclass(frozen=True)
class Association:
    stack: str
    workload: str
    covariate: Covariate
    rho: float
    p_value: float
    runs: int
    low: float
    high: float

    def sentence(self) -> str:
        direction = "longer" if self.rho > 0 else "shorter"
        return (
            f"{self.stack}/{self.workload}: its runs took {direction} the more {self.covariate.words} "
            f"(Spearman rho {self.rho:+.2f}, p {self.p_value:.2g}, {self.runs} runs; "
            f"{self.covariate.spread(self.low, self.high)})"
        )


def _cv(values: list[float]) -> float:
    mean = sum(values) / len(values)
    if mean <= 0:
        return 0.0
    return float((sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 / mean)


# Up to this many runs the p-value is exact, over every pairing of the runs' ranks (8! =
# 40,320); scipy's t approximation reads p 1e-24 for a perfect rank order of 5 runs, whose
# exact p is 2/5! = 0.017.
EXACT_UP_TO = 8


def spearman(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Spearman's rho and its two-sided p-value: exact for a few runs, else scipy's."""
    from scipy import stats as scipy_stats  # deferred: 0.45 s of import `clean` needs not

    found = scipy_stats.spearmanr(xs, ys)
    rho = float(found.statistic)
    if len(xs) > EXACT_UP_TO or math.isnan(rho):
        return rho, float(found.pvalue)
    rank_x = scipy_stats.rankdata(xs) - (len(xs) + 1) / 2
    rank_y = scipy_stats.rankdata(ys) - (len(ys) + 1) / 2
    pairings = rank_y[np.array(list(itertools.permutations(range(len(ys)))))]
    every = pairings @ rank_x / math.sqrt(float(rank_x @ rank_x) * float(rank_y @ rank_y))
    return rho, float(np.mean(np.abs(every) >= abs(rho) - 1e-12))


def associations(runs: list[RunRecord]) -> list[Association]:
    """Every significant (covariate, noisy cell) association among the measured ok runs."""
    cells: dict[tuple[str, str], list[RunRecord]] = {}
    for run in runs:
        if run.measured:
            cells.setdefault((run.stack, run.workload), []).append(run)
    found = []
    for (stack, workload), members in cells.items():
        times = [r.wall_s for r in members]
        if len(times) < MIN_RUNS or _cv(times) <= NOISY_CV:
            continue
        for covariate in COVARIATES:
            pairs = [(value, r.wall_s) for r in members if (value := covariate.value(r.facts)) is not None]
            if len(pairs) < MIN_RUNS or len({x for x, _ in pairs}) < 2:
                continue
            rho, p_value = spearman([x for x, _ in pairs], [y for _, y in pairs])
            if p_value < ALPHA:
                xs = [x for x, _ in pairs]
                found.append(
                    Association(
                        stack, workload, covariate, float(rho), float(p_value), len(pairs), min(xs), max(xs)
                    )
                )
    return found


def notes(runs: list[RunRecord]) -> list[str]:
    return [association.sentence() for association in associations(runs)]
