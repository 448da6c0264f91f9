"""Many comparisons at once: Holm's step-down (the default) or Benjamini-Hochberg.

Each comparison gets a level of its own, and its interval is drawn at that level, so that
a row is significant exactly when its interval excludes no change:

- Holm: the j-th smallest p-value is tested at alpha / (m - j + 1) until the first that
  fails; that one and all after it keep the level it failed at. This controls the chance
  of any false alarm in the family at alpha.
- Benjamini-Hochberg: with k rejections, every comparison's interval is drawn at level
  1 - k alpha / m (1 - alpha / m when k = 0), the false-coverage-rate intervals of
  Benjamini and Yekutieli. This controls the expected share of false alarms at alpha.
- none: every comparison at alpha."""

from dataclasses import dataclass

import numpy as np

CORRECTIONS = ("holm", "bh", "none")


@dataclass(frozen=True)
class Adjusted:
    alpha: float  # the level this comparison is decided at
    p_adjusted: float


def adjust(p_values: list[float], alpha: float, correction: str) -> list[Adjusted]:
    m = len(p_values)
    if m == 0:
        return []
    p = np.asarray(p_values, dtype=float)
    if correction == "none":
        return [Adjusted(alpha, float(v)) for v in p]
    order = np.argsort(p, kind="stable")
    if correction == "bh":
        from scipy import stats as scipy_stats  # deferred: 0.7 s of import that Holm needs not

        adjusted = scipy_stats.false_discovery_control(p, method="bh")
        rejected = int(np.sum(adjusted <= alpha))
        level = alpha * max(rejected, 1) / m
        return [Adjusted(level, float(min(1.0, v))) for v in adjusted]
    if correction != "holm":
        raise ValueError(f"unknown correction {correction!r}; valid: {', '.join(CORRECTIONS)}")
    levels = np.empty(m)
    holm = np.empty(m)
    running = 0.0
    failed_at: float | None = None
    for step, index in enumerate(order):
        running = max(running, (m - step) * p[index])
        holm[index] = min(1.0, running)
        if failed_at is None and p[index] > alpha / (m - step):
            failed_at = alpha / (m - step)
        levels[index] = failed_at if failed_at is not None else alpha / (m - step)
    return [Adjusted(float(levels[i]), float(holm[i])) for i in range(m)]
