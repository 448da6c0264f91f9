"""The statistics: one design per verdict, exact where it can be, intervals that mean
what they say, and a family of comparisons corrected together."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from layerbench import stats
from layerbench.core.runs import RunRecord
from layerbench.reports.base import csh_elapsed, csh_time_line
from layerbench.selftest import validity
from layerbench.stats import family, intervals, methods


def _runs(stack: str, values: list[float], workload: str = "w", **extra: object) -> list[RunRecord]:
    return [
        RunRecord.from_row(
            {"stack": stack, "workload": workload, "rep": i, "status": "ok", "wall_s": v, **extra}
        )
        for i, v in enumerate(values)
    ]


def _row(
    values: list[float], base: list[float], *, paired: bool = False, metric: str = "wall_s"
) -> stats.Summary:
    entry = stats.Entry("s", "w", values, base, *((values, base) if paired else (None, None)))
    (row,) = stats.compare_family([entry], metric, stats.Design(paired=paired))
    return row


# ---- the property that makes every report consistent ------------------------------------------

positive = st.floats(min_value=0.001, max_value=1000, allow_nan=False, allow_infinity=False)
counts = st.integers(min_value=0, max_value=5).map(float)
samples = st.one_of(st.lists(positive, min_size=2, max_size=12), st.lists(counts, min_size=2, max_size=12))


@settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    family_samples=st.lists(st.tuples(samples, samples), min_size=1, max_size=6),
    paired=st.booleans(),
    correction=st.sampled_from(family.CORRECTIONS),
    alpha=st.sampled_from([0.01, 0.05, 0.1, 0.5]),
    margin=st.sampled_from([0.0, 0.05, 0.2]),
)
def test_significant_exactly_when_the_interval_excludes_1(
    family_samples: list[tuple[list[float], list[float]]],
    paired: bool,
    correction: str,
    alpha: float,
    margin: float,
) -> None:
    entries = []
    for i, (a, b) in enumerate(family_samples):
        n = min(len(a), len(b))
        pairs = (a[:n], b[:n]) if paired else (None, None)
        entries.append(stats.Entry(f"s{i}", "w", a, b, *pairs))
    design = stats.Design(alpha=alpha, correction=correction, equivalence=margin, paired=paired)
    for row in stats.compare_family(entries, "wall_s", design):
        if row.ratio_ci_low is None:
            assert row.decision in ("insufficient data", "no ratio")
            continue
        excludes = row.ratio_ci_low > 1 or row.ratio_ci_high < 1
        if row.decision == "equivalent":
            # its interval is the two one-sided tests' (1 - 2 alpha), within the margin; being
            # narrower than the test's, it may miss 1 where the test found no difference
            assert not row.significant and 1 - margin <= row.ratio_ci_low <= row.ratio_ci_high <= 1 + margin
            assert row.bound is not None and "-" not in row.bound, row.bound
        else:
            assert row.significant == excludes, row
        assert row.ratio_ci_low <= row.ratio <= row.ratio_ci_high or math.isnan(row.ratio), row
        if row.significant:
            assert row.p_adjusted is not None and row.p_adjusted <= alpha + 1e-12, row
        elif row.method and row.method.endswith("-t"):
            assert row.p_adjusted is not None and row.p_adjusted >= alpha - 1e-9, row
        if row.decision == "equivalent":
            assert 1 - margin <= row.ratio_ci_low and row.ratio_ci_high <= 1 + margin


def test_rank_methods_are_exact_and_match_scipy_without_ties() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.lognormal(0, 0.1, 7), rng.lognormal(0.1, 0.1, 6)
    fit = methods.rank_sum(np.log(a), np.log(b))
    assert fit.p_value == pytest.approx(scipy_stats.mannwhitneyu(a, b, method="exact").pvalue)
    d = np.log(a[:6]) - np.log(b)
    fit = methods.signed_rank(d)
    assert fit.p_value == pytest.approx(scipy_stats.wilcoxon(d, method="exact").pvalue)


def test_ties_never_fall_below_the_exact_floor() -> None:
    # [2,2,2] vs [1,1,1]: no test with 3 and 3 runs can go below 2 / C(6, 3) = 0.1.
    row = _row([2.0, 2, 2], [1.0, 1, 1], metric="majflt")
    assert row.method == "rank-sum" and row.p_value == pytest.approx(0.1)
    assert row.decision == "undecidable" and row.verdict == "undecidable with 3 repetitions"
    paired = _row([2.0, 2, 2, 2], [1.0, 1, 1, 1], paired=True, metric="majflt")
    assert paired.method == "signed-rank" and paired.p_value == pytest.approx(2 / 2**4)


def test_a_zero_baseline_leaves_the_interval_open_above() -> None:
    row = _row([5.0, 5, 5, 5, 5], [0.0, 0, 1, 2, 3], metric="majflt")
    assert row.method == "rank-sum"
    assert row.ratio_ci_high == math.inf and row.ratio_ci_low is not None and row.ratio_ci_low > 1
    assert row.decision == "higher"


def test_large_consistent_effects_are_decided_with_3_repetitions() -> None:
    """The seed's fuse extract: every fuse run 5.27-5.70 s, every dir run 1.36-1.50 s."""
    row = _row([5.27, 5.70, 5.41], [1.36, 1.50, 1.40], paired=True)
    assert row.method == "paired-t" and row.decision == "slower"
    assert 3.7 < row.ratio < 4.0 and row.ratio_ci_low > 3


def test_verdicts_name_their_direction() -> None:
    assert _row([2.0, 2.1, 2.2, 1.9, 2.05], [1.0, 1.05, 0.95, 1.02, 0.98]).decision == "slower"
    throughput = _row([1.0, 1.05, 0.95, 1.02, 0.98], [2.0, 2.1, 2.2, 1.9, 2.05], metric="throughput")
    assert throughput.decision == "slower"
    assert (
        _row([2.0, 2.1, 2.2, 1.9, 2.05], [1.0, 1.05, 0.95, 1.02, 0.98], metric="minflt").decision == "higher"
    )


def test_equivalent_and_inconclusive() -> None:
    rng = np.random.default_rng(1)
    base = list(rng.lognormal(0, 0.005, 10))
    same = list(np.array(base) * rng.lognormal(0, 0.005, 10))
    row = _row(same, base, paired=True)
    assert row.decision == "equivalent" and row.ratio_ci_low is not None and row.ratio_ci_high is not None
    # Beside the margin, how far either way the interval allows, read off the interval itself.
    slower, faster = row.ratio_ci_high - 1, 1 - row.ratio_ci_low
    bound = f"at most {slower:.1%} slower, at most {faster:.1%} faster"
    assert row.verdict == f"equivalent (within ±10%): {bound}"
    wide = _row([1.0, 1.3, 0.8, 1.2], [1.0, 0.9, 1.25, 0.85], paired=True)
    assert wide.decision == "inconclusive" and wide.verdict.startswith("inconclusive: [")
    assert "repetitions would decide it" in wide.verdict and wide.reps_to_decide and wide.reps_to_decide > 4
    assert wide.bound and wide.bound.startswith("at most ") and "slower" in wide.bound


def test_equivalence_is_the_two_one_sided_tests_and_shows_their_interval() -> None:
    """Equivalent when the interval at 1 - 2 alpha (TOST) lies within the margin, even where
    the test's own interval at 1 - alpha does not; the row shows the TOST interval at its
    level, so the verdict agrees with the interval printed."""
    log_ratios = 0.12 * np.array([-1.5, -0.5, 0.5, 1.5, -1, 1, 0, 0.2])
    values, base = list(np.exp(log_ratios)), [1.0] * 8
    row = _row(values, base, paired=True)
    assert row.method == "signed-rank" and row.tested_alpha == stats.ALPHA
    test_low, _, test_level = methods.signed_rank(log_ratios).interval(stats.ALPHA)
    assert math.exp(test_low) < 1 - stats.EQUIVALENCE and test_level >= 1 - stats.ALPHA
    tost_low, tost_high, tost_level = methods.signed_rank(log_ratios).interval(2 * stats.ALPHA)
    assert row.decision == "equivalent"
    assert (row.ratio_ci_low, row.ratio_ci_high) == (math.exp(tost_low), math.exp(tost_high))
    assert row.ratio_ci_level == tost_level and 1 - 2 * stats.ALPHA <= tost_level < test_level
    wider = _row(list(np.exp(log_ratios * 1.1)), base, paired=True)
    assert wider.decision == "inconclusive" and wider.ratio_ci_level == pytest.approx(test_level)


def test_an_equivalence_interval_to_one_side_of_1_reads_as_the_range_it_holds() -> None:
    """A small steady difference: the interval at 1 - 2 alpha lies within ±10% but above 1,
    while the test's own interval at 1 - alpha holds 1. It is equivalent (both one-sided
    tests reject), not significant, and its bound reads as the range it shows, "0.3% to 4.9%
    slower", never "at most -0.2% faster" (found by the property test above)."""
    log_ratios = np.array([0.055, 0.052, -0.019, -0.009, -0.004, 0.021, 0.039, 0.081, 0.014])
    values = np.exp(log_ratios)
    fit = methods.fit(values, np.ones(len(values)), paired=True, strictest_alpha=stats.ALPHA)
    assert fit is not None
    test_low, _, _ = fit.interval(stats.ALPHA)
    tost_low, tost_high, _ = fit.interval(2 * stats.ALPHA)
    assert test_low < 0 < tost_low and math.exp(tost_high) < 1 + stats.EQUIVALENCE  # the case
    row = _row(list(values), [1.0] * len(values), paired=True)
    assert row.decision == "equivalent" and not row.significant, row.verdict
    assert row.ratio_ci_low == pytest.approx(math.exp(tost_low)) and row.ratio_ci_low > 1
    assert row.bound == f"{math.exp(tost_low) - 1:.1%} to {math.exp(tost_high) - 1:.1%} slower", row.bound
    assert "-" not in row.bound


def test_median_interval_states_the_level_it_has() -> None:
    assert intervals.median_interval(np.array([3.0, 1, 2]))[2] == pytest.approx(0.75)
    low, high, level = intervals.median_interval(np.array([5.0, 1, 4, 2, 3]))
    assert (low, high, level) == (1.0, 5.0, pytest.approx(0.9375))
    low, high, level = intervals.median_interval(np.arange(1.0, 21))
    assert level >= 0.95 and 1 < low < 10 < high < 20


def test_median_interval_coverage_is_at_least_its_level() -> None:
    rng = np.random.default_rng(11)
    for n in (3, 5, 8, 12):
        hits, level = 0, 0.0
        for _ in range(2000):
            low, high, level = intervals.median_interval(rng.lognormal(0, 0.1, n))
            hits += low <= 1 <= high
        error = math.sqrt(level * (1 - level) / 2000)
        assert hits / 2000 >= level - 3 * error, (n, hits / 2000, level)


def test_holm_and_bh_levels() -> None:
    adjusted = family.adjust([0.001, 0.02, 0.04], 0.05, "holm")
    assert [a.alpha for a in adjusted] == pytest.approx([0.05 / 3, 0.05 / 2, 0.05])
    stopped = family.adjust([0.001, 0.04, 0.3], 0.05, "holm")  # 0.04 > 0.05 / 2: it and all after keep 0.025
    assert [a.alpha for a in stopped] == pytest.approx([0.05 / 3, 0.05 / 2, 0.05 / 2])
    assert [a.p_adjusted for a in adjusted] == pytest.approx([0.003, 0.04, 0.04])
    bh = family.adjust([0.001, 0.02, 0.04], 0.05, "bh")
    assert [a.p_adjusted for a in bh] == pytest.approx([0.003, 0.03, 0.04])
    assert all(a.alpha == pytest.approx(0.05) for a in bh)  # 3 rejections: level 3 alpha / 3
    assert [a.alpha for a in family.adjust([0.2, 0.5], 0.05, "none")] == [0.05, 0.05]


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "unpaired"])
def test_family_wise_false_alarms_at_n_8_stay_at_alpha(paired: bool) -> None:
    """Seeded A/A experiments shaped like the default one (9 comparisons, Holm)."""
    noise = validity.DRIFT if paired else validity.INDEPENDENT
    tally = validity.calibrate(8, noise, paired=paired, shift=0.0, experiments=600, seed=21)
    rate, error = validity.Tally.rate(tally.false_alarms, tally.experiments)
    assert rate <= stats.ALPHA + error, (rate, error)


def test_disturbed_runs_are_left_out() -> None:
    runs = _runs("a", [1.0, 1.1, 0.9]) + _runs("b", [1.0, 1.05, 0.95])
    runs.append(replace(_runs("b", [9.0])[0], rep=3, facts={"disturbed": True}))
    (row,) = [r for r in stats.summaries(runs, "a", ["a", "b"], ["w"], ["wall_s"]) if r.stack == "b"]
    assert row.n == 3 and row.median == 1.0


def test_warmups_and_failures_are_not_measured() -> None:
    warmup = RunRecord(0, "a", "w", "ok", rep=0, warmup=True, values={"wall_s": 50.0})
    failed = RunRecord(0, "a", "w", "failed", rep=2, values={"wall_s": 0.0})
    runs = [*_runs("a", [1.0, 1.1]), warmup, failed]
    assert [r.wall_s for r in stats.measured(runs)[("a", "w")]] == [1.0, 1.1]


def test_pairs_use_the_repetitions_both_stacks_have() -> None:
    runs = _runs("a", [1.0, 1.1, 0.9, 1.05]) + _runs("b", [2.0, 2.2, 1.8])
    design = stats.Design(paired=True)
    (row,) = [
        r for r in stats.summaries(runs, "a", ["a", "b"], ["w"], ["wall_s"], design=design) if r.stack == "b"
    ]
    assert row.paired and row.ratio == pytest.approx(2.0)
    unpaired = stats.Design(paired=False)
    (row,) = [
        r
        for r in stats.summaries(runs, "a", ["a", "b"], ["w"], ["wall_s"], design=unpaired)
        if r.stack == "b"
    ]
    assert not row.paired


def test_paired_repetitions_keep_shared_drift_out_of_the_interval() -> None:
    drift = [1.0, 1.5, 0.8, 1.3, 1.1, 0.9]
    base = [d * 1.0 for d in drift]
    slower = [d * 1.04 for d in drift]
    paired, unpaired = _row(slower, base, paired=True), _row(slower, base)
    assert paired.decision == "slower" and paired.ratio == pytest.approx(1.04)
    assert unpaired.decision in ("inconclusive", "undecidable")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.004, "0:00.00"),
        (59.996, "1:00.00"),
        (61, "1:01.00"),
        (3599.996, "1:00:00"),
        (3600, "1:00:00"),
        (364.13, "6:04.13"),
        (3723.4, "1:02:03"),
    ],
)
def test_csh_elapsed(seconds: float, text: str) -> None:
    assert csh_elapsed(seconds) == text


def test_the_csh_time_line_of_a_run_and_of_one_stored_without_its_counters() -> None:
    # The FreeBSD report's nullfs line: 176.257u 38.316s 6:04.13 58.9% 0+2353k 183+366io 76805pf+0w
    counters = {"user_s": 176.257, "sys_s": 38.316, "wall_s": 364.13, "cpu_pct": 58.9, "maxrss_kb": 2353}
    counters |= {"inblock": 183, "oublock": 366, "majflt": 76805}
    run = RunRecord(0, "nullfs", "build", "ok", values=counters)
    assert csh_time_line(run) == "176.257u 38.316s 6:04.13 58.9% 0+2353k 183+366io 76805pf+0w"
    assert csh_time_line(run.with_values(maxrss_kb=None)) is None


def test_noisy_samples_warn() -> None:
    rows = stats.summaries(_runs("a", [1.0, 2.0, 1.0, 2.0]), "a", ["a"], ["w"], ["wall_s"])
    assert any("varies by" in w for w in stats.warnings_for(rows, [], "a"))


def test_runs_mostly_flagged_disturbed_are_kept() -> None:
    """A stack whose own kernel threads look like other work (a loop device on a tmpfs)
    gets most of its runs flagged: they are kept, not all thrown away."""
    runs = _runs("a", [1.0, 1.1, 0.9]) + _runs("b", [2.0, 2.1, 1.9], facts={"disturbed": True})
    assert len(stats.measured(runs)[("b", "w")]) == 3
    runs[-2:] = [replace(run, facts={"disturbed": False}) for run in runs[-2:]]
    assert [r.wall_s for r in stats.measured(runs)[("b", "w")]] == [2.1, 1.9]


def test_an_unbounded_interval_is_null_in_json_and_absent_from_the_plot() -> None:
    from layerbench.reports.json_export import finite

    row = _row([5.0, 5, 5, 5, 5], [0.0, 0, 1, 2, 3], metric="majflt")
    assert json.loads(json.dumps(finite(row.as_dict()), allow_nan=False))["ratio_ci_high"] is None
