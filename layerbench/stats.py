"""Statistics: medians with bootstrap confidence intervals, ratios of medians against the
baseline, Mann-Whitney U tests and the verdicts built on them.

In an interleaved experiment every repetition runs each stack once, close together in
time, so a stack's run and the baseline's run of one repetition are a pair: the ratio's
bootstrap then resamples repetitions (both runs of a drawn repetition together), which
keeps whatever drift they share out of the interval. Otherwise the two samples are
resampled independently."""

import math
import warnings
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

ALPHA = 0.05
CONFIDENCE = 0.95
NOISY_CV = 0.05
BOOTSTRAP_RESAMPLES = 10_000

# metric -> which direction is better ("lower", "higher", None for neither)
METRICS: dict[str, str | None] = {
    "wall_s": "lower",
    "throughput": "higher",
    "user_s": "lower",
    "sys_s": "lower",
    "cpu_pct": None,
    "maxrss_kb": None,
    "minflt": None,
    "majflt": None,
    "inblock": None,
    "oublock": None,
    "nvcsw": None,
    "nivcsw": None,
    "read_bytes": None,
    "write_bytes": None,
    "helper_cpu_s": "lower",
}
TIME_METRICS = ("wall_s", "throughput")


@dataclass
class Summary:
    stack: str
    workload: str
    metric: str
    n: int
    median: float | None
    mean: float | None
    stdev: float | None
    cv: float | None
    ci_low: float | None
    ci_high: float | None
    ratio: float | None
    ratio_ci_low: float | None
    ratio_ci_high: float | None
    p_value: float | None
    verdict: str
    paired: bool = False  # the ratio's CI resampled repetitions as pairs

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rng(*keys: str) -> np.random.Generator:
    # Deterministic per (stack, workload, metric): the same data gives the same CIs.
    seed = sum((i + 1) * ord(c) for i, c in enumerate("/".join(keys))) % 2**32
    return np.random.default_rng(seed)


def resamples(n: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of BOOTSTRAP_RESAMPLES resamples of n values, one resample per row."""
    return rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))


def bootstrap_medians(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.median(values[resamples(len(values), rng)], axis=1)


def percentile_interval(draws: np.ndarray) -> tuple[float, float]:
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)


def mann_whitney_p(a: np.ndarray, b: np.ndarray) -> float | None:
    if len(a) < 2 or len(b) < 2:
        return None
    if np.all(a == a[0]) and np.all(b == b[0]) and a[0] == b[0]:
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = scipy_stats.mannwhitneyu(a, b, alternative="two-sided")
    return float(result.pvalue)


def smallest_possible_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided exact Mann-Whitney p-value with these sample sizes."""
    if n_a < 1 or n_b < 1:
        return 1.0
    return min(1.0, 2 / math.comb(n_a + n_b, n_a))


def verdict(metric: str, ratio: float | None, p_value: float | None) -> str:
    if ratio is None or p_value is None:
        return "insufficient data"
    if p_value >= ALPHA or ratio == 1:
        return "no significant difference"
    better = METRICS.get(metric)
    if better is None:
        return "higher" if ratio > 1 else "lower"
    worse = ratio > 1 if better == "lower" else ratio < 1
    return "slower" if worse else "faster"


def summarize(
    stack: str,
    workload: str,
    metric: str,
    values: list[float],
    baseline: list[float] | None,
    *,
    paired: bool = False,
) -> Summary:
    """baseline is None for the baseline stack itself. paired: values[i] and baseline[i]
    come from the same repetition (equal lengths)."""
    data = np.asarray(values, dtype=float)
    n = len(data)
    if n == 0:
        return Summary(stack, workload, metric, 0, *([None] * 10), "insufficient data")
    rng = _rng(stack, workload, metric)
    median = float(np.median(data))
    mean = float(np.mean(data))
    stdev = float(np.std(data, ddof=1)) if n > 1 else None
    cv = stdev / mean if stdev is not None and mean else None
    picks = resamples(n, rng)
    medians = np.median(data[picks], axis=1)
    ci_low, ci_high = percentile_interval(medians) if n > 1 else (median, median)
    # What describes this sample alone; the comparison with the baseline follows it.
    own = (stack, workload, metric, n, median, mean, stdev, cv, ci_low, ci_high)
    if baseline is None:
        return Summary(*own, 1.0, 1.0, 1.0, None, "baseline")
    base = np.asarray(baseline, dtype=float)
    base_median = float(np.median(base)) if len(base) else 0.0
    if len(base) == 0 or base_median == 0:
        return Summary(*own, None, None, None, mann_whitney_p(data, base), "no ratio (baseline is 0)")
    ratio = median / base_median
    paired = paired and len(base) == n and n > 1
    # Paired: the baseline's runs of the very repetitions drawn for this stack.
    base_medians = np.median(base[picks], axis=1) if paired else bootstrap_medians(base, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = medians / base_medians
    ratios = ratios[np.isfinite(ratios)]
    ratio_low, ratio_high = percentile_interval(ratios) if len(ratios) else (None, None)
    p_value = mann_whitney_p(data, base)
    return Summary(*own, ratio, ratio_low, ratio_high, p_value, verdict(metric, ratio, p_value), paired)


def measured(runs: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Successful, non-warm-up runs grouped by (stack, workload)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        if run["status"] == "ok" and not run["warmup"]:
            groups[(run["stack"], run["workload"])].append(run)
    return groups


def _pairs(
    runs: list[dict[str, Any]], base_runs: list[dict[str, Any]], metric: str
) -> tuple[list[float], list[float]] | None:
    """The two samples in repetition order, if they have exactly the same repetitions."""
    own = {r.get("rep"): r[metric] for r in runs if r.get(metric) is not None}
    base = {r.get("rep"): r[metric] for r in base_runs if r.get(metric) is not None}
    if None in own or own.keys() != base.keys() or len(own) != len(runs) or len(base) != len(base_runs):
        return None
    reps = sorted(own)
    return [own[r] for r in reps], [base[r] for r in reps]


def summaries(
    runs: list[dict[str, Any]],
    baseline: str,
    stacks: list[str],
    workloads: list[str],
    metrics: list[str] | None = None,
    *,
    paired: bool = False,
) -> list[Summary]:
    """paired: the experiment ran in interleaved order, so a stack's and the baseline's runs
    of one repetition pair up (used when both have exactly the same repetitions)."""
    groups = measured(runs)
    rows = []
    for workload in workloads:
        base_runs = groups.get((baseline, workload), [])
        for stack in stacks:
            own_runs = groups.get((stack, workload), [])
            for metric in metrics or list(METRICS):
                values = [r[metric] for r in own_runs if r.get(metric) is not None]
                if stack == baseline:
                    rows.append(summarize(stack, workload, metric, values, None))
                    continue
                pairs = _pairs(own_runs, base_runs, metric) if paired else None
                if pairs is not None:
                    rows.append(summarize(stack, workload, metric, *pairs, paired=True))
                    continue
                base_values = [r[metric] for r in base_runs if r.get(metric) is not None]
                rows.append(summarize(stack, workload, metric, values, base_values))
    return rows


def warnings_for(rows: list[Summary], runs: list[dict[str, Any]], baseline: str) -> list[str]:
    found = []
    for row in rows:
        if row.metric == "wall_s" and row.cv is not None and row.cv > NOISY_CV:
            found.append(
                f"{row.stack}/{row.workload}: wall time varies by {row.cv:.1%} (CV > "
                f"{NOISY_CV:.0%}); more repetitions or a quieter machine would help"
            )
    wall = {(r.stack, r.workload): r for r in rows if r.metric == "wall_s"}
    for (stack, workload), row in wall.items():
        base = wall.get((baseline, workload))
        if stack != baseline and base and row.n and base.n:
            floor = smallest_possible_p(row.n, base.n)
            if floor >= ALPHA:
                found.append(
                    f"{stack}/{workload}: with {row.n} and {base.n} runs no difference can be "
                    f"significant (smallest p = {floor:.2f}); use at least 4 repetitions"
                )
    failed = [r for r in runs if r["status"] == "failed"]
    if failed:
        found.append(f"{len(failed)} run(s) failed; see the failed runs below")
    return found
