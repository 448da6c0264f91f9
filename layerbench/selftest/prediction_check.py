"""The check of an inconclusive verdict's "about N repetitions would decide it": simulated
comparisons (paired log ratios, normal, of a known ratio and spread) are drawn at 5
repetitions; where the verdict is inconclusive and names N, the comparison gets N - 5 more
repetitions of the same kind and is decided again. The share decided at N is what the
phrase promises; it is printed by `layerbench selftest` and tabled in docs/statistics.md."""

import math

import numpy as np

from layerbench import stats
from layerbench.selftest.check import Check
from layerbench.stats import methods

FIRST = 5
# The row alpha of the default experiment's first Holm step without a budget: 3 comparisons.
ALPHA = stats.ALPHA / 3
RATIOS = (1.0, 1.03, 1.08, 1.15)
SPREADS = (0.05, 0.1, 0.15)  # standard deviation of the per-repetition log ratio
BUCKETS = ((6, 10), (11, 30), (31, 100), (101, stats.MAX_REPS_SUGGESTED - 1))
HOLDS = 0.5  # "about N would decide it" is said where N decides at least this often


def _verdict(log_ratios: np.ndarray, margin: float) -> tuple[bool, int | None]:
    """(decided, N when inconclusive), as stats.decide words the row a report prints."""
    row = stats.Summary(
        "sim", "sim", "wall_s", len(log_ratios), median=None, mean=None, stdev=None, cv=None,
        ci_low=None, ci_high=None, ci_level=None, ratio=None, ratio_ci_low=None,
        ratio_ci_high=None, ratio_ci_level=None, p_value=None, p_adjusted=None, verdict="",
    )  # fmt: skip
    stats.decide(row, methods.paired_t(log_ratios), ALPHA, ALPHA, stats.Design(equivalence=margin))
    return row.decision != "inconclusive", row.reps_to_decide


def decided_at_prediction(trials: int = 300, seed: int = 5) -> dict[tuple[int, int], tuple[int, int]]:
    """Per bucket of N (low, high): (inconclusive comparisons naming an N in it, decided at N)."""
    rng = np.random.default_rng(seed)
    margin = stats.EQUIVALENCE
    found = {bucket: (0, 0) for bucket in BUCKETS}
    for spread in SPREADS:
        for ratio in RATIOS:
            for _ in range(trials):
                first = rng.normal(math.log(ratio), spread, FIRST)
                done, wanted = _verdict(first, margin)
                if done or wanted is None:
                    continue
                bucket = next((b for b in BUCKETS if b[0] <= wanted <= b[1]), None)
                if bucket is None:
                    continue
                more = np.concatenate([first, rng.normal(math.log(ratio), spread, wanted - FIRST)])
                total, hits = found[bucket]
                found[bucket] = (total + 1, hits + _verdict(more, margin)[0])
    return found


def checks(trials: int = 300, seed: int = 5) -> list[Check]:
    found: list[Check] = []
    for (low, high), (total, hits) in decided_at_prediction(trials, seed).items():
        share = hits / total if total else 0.0
        error = math.sqrt(share * (1 - share) / total) if total else 0.0
        found.append(
            Check(
                f'"about N repetitions would decide it", N {low}-{high} (simulated, paired-t, '
                f"ratios {', '.join(map(str, RATIOS))}, log-ratio sd {', '.join(map(str, SPREADS))})",
                f"decided at N in {share:.0%} ± {error:.1%} of {total} inconclusive comparisons "
                f"(said where it holds at least {HOLDS:.0%})",
                total > 0 and share >= HOLDS,
            )
        )
    return found
