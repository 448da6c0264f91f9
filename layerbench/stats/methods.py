"""The comparisons of one stack with the baseline, each a test and the interval that
inverts it, so that "significant at level a" holds exactly when the interval at level
1 - a excludes no change. Everything is on the log scale: a difference of logs is the
log of a ratio.

- signed-rank (paired): Wilcoxon's signed-rank test on the per-repetition log ratios,
  exact, with the Hodges-Lehmann interval (order statistics of the Walsh averages).
- rank-sum (unpaired): the Mann-Whitney test, exact, with the Hodges-Lehmann interval of
  the shift (order statistics of all pairwise differences).
- paired-t / welch-t: Student's t on the per-repetition log ratios, or Welch's t on the two
  samples' logs. They assume the logs are roughly normal; they are used where a rank test
  cannot reach the level at all (3-5 repetitions), so that a large, consistent effect can
  still be decided, and only where the data have a spread to scale by and no zeros.

For the rank tests the p-value is defined from the same order statistics as the interval:
c = min(#{w <= 0}, #{w >= 0}) over the Walsh averages or differences w, and p = 2 P(T <= c)
under the exact null distribution. Ties and zeros count against significance, so p never
falls below the exact floor. Zeros in the data are -inf on the log scale and make the
interval unbounded on that side, as it should be."""

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from layerbench.stats import intervals

# Exact rank distributions are counted for samples up to this size; beyond, the normal
# approximation of the same statistic is used (its floor is then far below any level).
_EXACT_MAX_PAIRS = 2500


@dataclass(frozen=True)
class Fit:
    """One method applied to one comparison, on the log scale."""

    method: str
    estimate: float  # log of the ratio
    p_value: float
    floor: float  # the smallest p-value this method can give with these sample sizes
    interval: Callable[[float], tuple[float, float, float]]  # alpha -> (low, high, achieved level)


def log_values(values: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(values)


# ---- exact null distributions --------------------------------------------------------------


@lru_cache(maxsize=256)
def signed_rank_cdf(n: int) -> np.ndarray:
    """P(T+ <= t) for t = 0 .. n(n+1)/2, T+ the signed-rank statistic of n values."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return np.cumsum(counts) / 2**n


@lru_cache(maxsize=256)
def rank_sum_cdf(n_a: int, n_b: int) -> np.ndarray:
    """P(U <= u) for u = 0 .. n_a n_b, U the Mann-Whitney statistic."""
    # Ways to get U = u with i values of a and j of b: ways[i][j][u] = ways[i-1][j][u-j] + ways[i][j-1][u].
    previous = [np.zeros(1) for _ in range(n_b + 1)]
    for j in range(n_b + 1):
        previous[j] = np.ones(1)  # i = 0: U = 0 in one way
    for i in range(1, n_a + 1):
        current = [np.ones(1)]  # j = 0: U = 0 in one way
        for j in range(1, n_b + 1):
            size = i * j + 1
            ways = np.zeros(size)
            shifted = previous[j]
            ways[j : j + len(shifted)] += shifted
            left = current[j - 1]
            ways[: len(left)] += left
            current.append(ways)
        previous = current
    counts = previous[n_b]
    return np.cumsum(counts) / math.comb(n_a + n_b, n_a)


def _rank_interval(
    sorted_w: np.ndarray, cdf: Callable[[int], float], alpha: float
) -> tuple[float, float, float]:
    """[w_(k), w_(N+1-k)] with k the largest rank whose tails stay within alpha."""
    total = len(sorted_w)
    k = 0
    low, high = 1, total // 2 + 1
    while low <= high:  # largest k >= 1 with 2 P(T <= k - 1) <= alpha
        middle = (low + high) // 2
        if 2 * cdf(middle - 1) <= alpha:
            k, low = middle, middle + 1
        else:
            high = middle - 1
    if k == 0:
        return -math.inf, math.inf, 1.0
    return float(sorted_w[k - 1]), float(sorted_w[total - k]), 1 - 2 * cdf(k - 1)


def _rank_fit(method: str, w: np.ndarray, cdf: Callable[[int], float]) -> Fit:
    w = np.where(np.isnan(w), 0.0, w)  # 0 against 0 (both -inf on the log scale): no change
    w.sort()
    ties_against = min(int(np.sum(w <= 0)), int(np.sum(w >= 0)))
    p_value = min(1.0, 2 * cdf(ties_against))
    return Fit(
        method=method,
        estimate=intervals.sorted_median(w),
        p_value=p_value,
        floor=min(1.0, 2 * cdf(0)),
        interval=lambda alpha: _rank_interval(w, cdf, alpha),
    )


def _normal_cdf(mean: float, sd: float) -> Callable[[int], float]:
    # scipy.special's functions are what scipy.stats' distributions compute with (the same
    # values), without their per-call argument handling (about 0.1 ms a call).
    from scipy import special  # deferred: `clean` needs no statistics

    return lambda t: float(special.ndtr((t + 0.5 - mean) / sd)) if sd > 0 else float(t >= mean)


@lru_cache(maxsize=256)
def _walsh_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(n)


def signed_rank(log_ratios: np.ndarray) -> Fit:
    n = len(log_ratios)
    i, j = _walsh_pairs(n)
    with np.errstate(invalid="ignore"):
        walsh = (log_ratios[i] + log_ratios[j]) / 2
    if len(walsh) <= _EXACT_MAX_PAIRS:
        table = signed_rank_cdf(n)
        cdf: Callable[[int], float] = lambda t: float(table[t]) if t >= 0 else 0.0  # noqa: E731
    else:
        cdf = _normal_cdf(n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24))
    return _rank_fit("signed-rank", walsh, cdf)


def rank_sum(log_a: np.ndarray, log_b: np.ndarray) -> Fit:
    n_a, n_b = len(log_a), len(log_b)
    with np.errstate(invalid="ignore"):
        differences = (log_a[:, None] - log_b[None, :]).ravel()
    if n_a * n_b <= _EXACT_MAX_PAIRS:
        table = rank_sum_cdf(n_a, n_b)
        cdf: Callable[[int], float] = lambda u: float(table[u]) if u >= 0 else 0.0  # noqa: E731
    else:
        cdf = _normal_cdf(n_a * n_b / 2, math.sqrt(n_a * n_b * (n_a + n_b + 1) / 12))
    return _rank_fit("rank-sum", differences, cdf)


@lru_cache(maxsize=4096)
def _t_quantile(q: float, df: float) -> float:
    from scipy import special  # deferred: `clean` needs no statistics

    return float(special.stdtrit(df, q))  # = scipy.stats.t.ppf(q, df), without its 0.7 s import


def _t_fit(method: str, estimate: float, se: float, df: float) -> Fit:
    from scipy import special  # deferred: `clean` needs no statistics

    if se == 0 or not math.isfinite(se):
        # Every repetition gave the same ratio: no spread to test against.
        exact = estimate == 0
        return Fit(
            method, estimate, 1.0 if exact else 0.0, 0.0, lambda alpha: (estimate, estimate, 1 - alpha)
        )
    t = estimate / se
    p_value = float(2 * special.stdtr(df, -abs(t)))  # = 2 scipy.stats.t.sf(|t|, df)

    def interval(alpha: float) -> tuple[float, float, float]:
        half = _t_quantile(1 - alpha / 2, round(df, 6)) * se
        return estimate - half, estimate + half, 1 - alpha

    return Fit(method, estimate, p_value, 0.0, interval)


def paired_t(log_ratios: np.ndarray) -> Fit:
    n = len(log_ratios)
    return _t_fit(
        "paired-t", float(np.mean(log_ratios)), float(np.std(log_ratios, ddof=1)) / math.sqrt(n), n - 1
    )


def welch_t(log_a: np.ndarray, log_b: np.ndarray) -> Fit:
    var_a, var_b = np.var(log_a, ddof=1) / len(log_a), np.var(log_b, ddof=1) / len(log_b)
    se = math.sqrt(var_a + var_b)
    if se == 0:
        df = float(len(log_a) + len(log_b) - 2)
    else:
        df = (var_a + var_b) ** 2 / (var_a**2 / (len(log_a) - 1) + var_b**2 / (len(log_b) - 1))
    return _t_fit("welch-t", float(np.mean(log_a) - np.mean(log_b)), se, df)


def rank_floor(n_a: int, n_b: int, paired: bool) -> float:
    """The smallest p-value the rank test of this design can give."""
    if paired:
        return min(1.0, 2 / 2**n_a)
    return min(1.0, 2 / math.comb(n_a + n_b, n_a))


def fit(values: np.ndarray, base: np.ndarray, *, paired: bool, strictest_alpha: float) -> Fit | None:
    """The comparison of values with base (ratio values / base), by the method the design
    calls for: the exact rank test where it can reach strictest_alpha, or where the data
    hold zeros (no logarithm); a t test where the rank test cannot decide at all."""
    if len(values) < 2 or len(base) < 2 or np.any(values < 0) or np.any(base < 0):
        return None
    log_a, log_b = log_values(values), log_values(base)
    has_zero = not (np.all(np.isfinite(log_a)) and np.all(np.isfinite(log_b)))
    use_rank = has_zero or rank_floor(len(values), len(base), paired) <= strictest_alpha
    if paired:
        with np.errstate(invalid="ignore"):
            ratios = log_a - log_b
        # No spread (a counter equal in every run): nothing for a t test to scale by.
        if use_rank or np.ptp(ratios) == 0:
            return signed_rank(ratios)
        return paired_t(ratios)
    if use_rank or (np.ptp(log_a) == 0 and np.ptp(log_b) == 0):
        return rank_sum(log_a, log_b)
    return welch_t(log_a, log_b)
