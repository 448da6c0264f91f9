import numpy as np
import pytest
from scipy import stats as scipy_stats

from layerbench import stats


def test_median_ci_brackets_the_median_and_narrows_with_more_data() -> None:
    rng = np.random.default_rng(1)
    small = list(rng.normal(10, 1, 5))
    large = list(rng.normal(10, 1, 200))
    s_small = stats.summarize("a", "w", "wall_s", small, None)
    s_large = stats.summarize("a", "w", "wall_s", large, None)
    assert s_small.ci_low <= s_small.median <= s_small.ci_high
    assert (s_large.ci_high - s_large.ci_low) < (s_small.ci_high - s_small.ci_low)
    assert s_large.ci_low < 10 < s_large.ci_high


def test_known_answers() -> None:
    row = stats.summarize("a", "w", "wall_s", [1.0, 2.0, 3.0, 4.0, 100.0], None)
    assert row.median == 3.0
    assert row.mean == 22.0
    assert row.stdev == pytest.approx(np.std([1, 2, 3, 4, 100], ddof=1))
    assert row.cv == pytest.approx(row.stdev / 22.0)
    assert row.verdict == "baseline" and row.ratio == 1.0


def test_ratio_p_value_and_verdict_match_scipy() -> None:
    base = [1.00, 1.02, 0.98, 1.01, 0.99]
    slow = [2.00, 2.05, 1.95, 2.02, 1.98]
    row = stats.summarize("fuse", "w", "wall_s", slow, base)
    assert row.ratio == pytest.approx(2.0 / 1.0)
    assert 1.9 < row.ratio_ci_low <= row.ratio <= row.ratio_ci_high < 2.1
    expected = scipy_stats.mannwhitneyu(slow, base, alternative="two-sided").pvalue
    assert row.p_value == pytest.approx(expected)
    assert row.p_value < 0.05 and row.verdict == "slower"


def test_throughput_higher_is_faster() -> None:
    row = stats.summarize("tmpfs", "w", "throughput", [200, 210, 205, 207, 202], [100, 101, 99, 102, 98])
    assert row.verdict == "faster"


def test_overlapping_samples_are_not_significant() -> None:
    rng = np.random.default_rng(7)
    a = list(rng.normal(1.0, 0.05, 6))
    b = list(rng.normal(1.0, 0.05, 6))
    row = stats.summarize("bind", "w", "wall_s", a, b)
    assert row.verdict == "no significant difference"
    assert row.ratio_ci_low < 1.0 < row.ratio_ci_high


def test_counters_get_higher_lower_not_slower() -> None:
    row = stats.summarize("x", "w", "majflt", [300, 310, 305, 290, 300], [1, 2, 1, 1, 2])
    assert row.verdict == "higher"


def test_zero_baseline_gives_no_ratio() -> None:
    row = stats.summarize("x", "w", "majflt", [3, 4, 5, 3, 4], [0, 0, 0, 0, 0])
    assert row.ratio is None and "baseline is 0" in row.verdict


def test_smallest_possible_p_and_the_warning() -> None:
    assert stats.smallest_possible_p(3, 3) == pytest.approx(0.1)
    assert stats.smallest_possible_p(5, 5) == pytest.approx(2 / 252)
    runs = [
        {"stack": s, "workload": "w", "status": "ok", "warmup": False, "wall_s": v}
        for s in ("a", "b")
        for v in (1.0, 1.1, 1.2)
    ]
    rows = stats.summaries(runs, "a", ["a", "b"], ["w"], ["wall_s"])
    assert any("no difference can be significant" in w for w in stats.warnings_for(rows, runs, "a"))


def test_noisy_samples_warn() -> None:
    runs = [
        {"stack": "a", "workload": "w", "status": "ok", "warmup": False, "wall_s": v}
        for v in (1.0, 1.5, 0.7, 1.2, 0.9)
    ]
    rows = stats.summaries(runs, "a", ["a"], ["w"], ["wall_s"])
    assert any("CV > 5%" in w for w in stats.warnings_for(rows, runs, "a"))


def test_warmups_and_failures_are_not_measured() -> None:
    runs = [
        {"stack": "a", "workload": "w", "status": "ok", "warmup": True, "wall_s": 99.0},
        {"stack": "a", "workload": "w", "status": "failed", "warmup": False, "wall_s": 0.0},
        {"stack": "a", "workload": "w", "status": "ok", "warmup": False, "wall_s": 1.0},
    ]
    row = stats.summaries(runs, "a", ["a"], ["w"], ["wall_s"])[0]
    assert row.n == 1 and row.median == 1.0


def _drifting_runs(stack_reps: list[int] | None = None) -> list[dict[str, object]]:
    # The machine's speed drifts by +-20 % across repetitions; within one repetition both
    # stacks see the same speed, and b is 5 % slower than a every time.
    speed = [0.8, 1.2, 0.9, 1.1, 1.0, 0.85, 1.15, 0.95]
    runs = []
    for stack, cost in (("a", 10.0), ("b", 10.5)):
        for rep, factor in enumerate(speed):
            if stack == "b" and stack_reps is not None and rep not in stack_reps:
                continue
            runs.append(
                {
                    "stack": stack,
                    "workload": "w",
                    "rep": rep,
                    "status": "ok",
                    "warmup": False,
                    "wall_s": cost * factor,
                }
            )
    return runs


def test_paired_repetitions_keep_shared_drift_out_of_the_ratio_ci() -> None:
    runs = _drifting_runs()
    independent = stats.summaries(runs, "a", ["a", "b"], ["w"], ["wall_s"])[1]
    paired = stats.summaries(runs, "a", ["a", "b"], ["w"], ["wall_s"], paired=True)[1]
    # The same ratio of medians either way; only its interval differs.
    assert paired.ratio == independent.ratio == pytest.approx(1.05)
    assert paired.paired and not independent.paired
    assert independent.ratio_ci_low < 1 < independent.ratio_ci_high  # type: ignore[operator]
    assert paired.ratio_ci_low == pytest.approx(1.05) and paired.ratio_ci_high == pytest.approx(1.05)


def test_pairs_are_used_only_when_the_repetitions_match() -> None:
    runs = _drifting_runs(stack_reps=[0, 1, 2, 3, 4, 5, 6])  # b's last repetition failed
    row = stats.summaries(runs, "a", ["a", "b"], ["w"], ["wall_s"], paired=True)[1]
    assert not row.paired and row.n == 7
    assert row.ratio_ci_low < 1 < row.ratio_ci_high  # type: ignore[operator]
