"""The change points of a trend: what PELT proposes, what the statistics keep, what is open."""

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from layerbench import stats
from layerbench.analysis.trend import (
    MARGIN,
    MIN_SEGMENT,
    Point,
    Series,
    Step,
    Trend,
    change_points,
    find_steps,
)
from layerbench.plan.schedule import Trial
from layerbench.store import Store


def _noisy(levels: list[float], seed: int = 1, noise: float = 0.02) -> list[float]:
    rng = np.random.default_rng(seed)
    return [level * math.exp(rng.normal(0, noise)) for level in levels]


def test_a_clear_step_is_proposed_where_it_is() -> None:
    assert 6 in change_points(_noisy([1.1] * 6 + [1.4] * 6))


def test_a_step_in_a_series_without_noise_is_proposed_there_alone() -> None:
    assert change_points([1.0] * 5 + [2.0] * 5) == [5]


def test_a_constant_series_has_no_change_point() -> None:
    assert change_points([1.2] * 10) == []


@pytest.mark.parametrize(
    "values", [[], [1.0], [1.0, 2.0, 2.0], [1.0, 1.0, 0.0, 2.0, 2.0], [1, 1, math.nan, 2, 2]]
)
def test_too_short_or_not_ratios_proposes_nothing(values: list[float]) -> None:
    assert change_points(values) == []


def test_proposals_leave_min_segment_experiments_on_each_side() -> None:
    for seed in range(5):
        values = _noisy([1.0] * 3 + [1.5] + [1.0] * 4, seed)
        cuts = change_points(values)
        edges = [0, *cuts, len(values)]
        assert all(b - a >= MIN_SEGMENT for a, b in itertools.pairwise(edges))


def _step(series: Series, index: int, ratio: float, decision: str) -> Step:
    row = stats.describe(series.stack, series.workload, "wall_s", [ratio])
    row.ratio, row.decision = ratio, decision
    return Step(series, index, row, MARGIN)


def _series() -> Series:
    points = [Point(i, f"2026-12-0{i}", 1.0) for i in range(1, 9)]
    return Series("p", "h", "s", "w", points)


def test_a_regression_is_open_until_a_later_step_brings_it_back() -> None:
    series = _series()
    up, down = _step(series, 3, 1.3, "slower"), _step(series, 6, 0.77, "faster")
    assert Trend("p", [series], [up], 1).open_regressions() == [up]
    assert Trend("p", [series], [up, down], 2).open_regressions() == []


def test_a_significant_step_inside_the_margin_is_not_a_step() -> None:
    series = _series()
    small, large = _step(series, 3, 1.03, "slower"), _step(series, 5, 1.2, "slower")
    undecided = _step(series, 5, 1.5, "inconclusive")
    assert [s.real for s in (small, large, undecided)] == [False, True, False]


def test_a_view_of_one_stack_keeps_the_plan_s_steps() -> None:
    one, other = _series(), Series("p", "h", "t", "w", _series().points)
    trend = Trend("p", [one, other], [_step(one, 3, 1.3, "slower"), _step(other, 4, 1.3, "slower")], 2)
    shown = trend.only("t", None)
    assert [s.stack for s in shown.series] == ["t"]
    assert [s.series.stack for s in shown.steps] == ["t"]


def _plan(rng: np.random.Generator, n: int, noise: float, step: float = 1.0) -> list[Series]:
    """Three series of n experiments; the first one steps by step halfway."""
    return [
        Series(
            "p",
            "h",
            stack,
            "w",
            [
                Point(
                    i + 1,
                    "",
                    1.1 * math.exp(rng.normal(0, noise)) * (step if stack == "a" and i >= n // 2 else 1),
                )
                for i in range(n)
            ],
        )
        for stack in "abc"
    ]


def test_plans_without_a_step_rarely_show_one() -> None:
    rng = np.random.default_rng(11)
    false = sum(bool(find_steps("p", _plan(rng, 12, 0.05), stats.Design()).real_steps()) for _ in range(300))
    assert false / 300 < 0.08  # alpha 0.05; 4 % here


def test_a_planted_step_is_found_alone_and_in_its_place() -> None:
    rng = np.random.default_rng(12)
    for _ in range(20):
        steps = find_steps("p", _plan(rng, 12, 0.03, 1.4), stats.Design()).real_steps()
        assert [(s.series.stack, s.index, s.regression) for s in steps] == [("a", 6, True)]


def test_a_later_step_is_found_after_an_earlier_one() -> None:
    levels = [1.1] * 5 + [1.4] * 5 + [1.7] * 5
    one = Series("p", "h", "a", "w", [Point(i + 1, "", v) for i, v in enumerate(_noisy(levels, 3))])
    trend = find_steps("p", [one], stats.Design())
    assert [s.index for s in trend.real_steps()] == [5, 10]
    assert [s.index for s in trend.open_regressions()] == [10]


def _stored_plan(store: Store, experiments: int) -> None:
    """Experiments of one plan, through the fake executor: bind a little slower from the
    fourth one on."""
    import random

    from layerbench.executors.fake import FakeExecutor
    from layerbench.experiment import Experiment
    from layerbench.plan import parse_plan

    text = (
        'name = "stored"\nreps = 20\nwarmup = 0\nbaseline = "disk"\n'
        '[stacks.disk]\nlayers = []\n[stacks.bind]\nlayers = [{ kind = "bind" }]\n'
        '[workloads.w]\nkind = "command"\nrun = "true"\n'
    )
    for number in range(experiments):

        def script(trial: Trial, number: int = number) -> dict[str, float]:
            noise = random.Random(number * 1000 + trial.index).gauss(0, 0.02)
            slower = 1.3 if trial.stack == "bind" and number >= 3 else 1.0
            return {"wall_s": slower * math.exp(noise)}

        experiment = Experiment(parse_plan(text, "stored.toml"), store, FakeExecutor(script), seed=number)
        experiment.prepare([])
        experiment.run()


def test_a_trend_reads_the_rows_each_experiment_stored_at_its_end_and_they_are_its_report_s(
    tmp_path: Path,
) -> None:
    from layerbench.analysis.trend import gather
    from layerbench.stats import sequential

    store = Store(tmp_path / "r.db")
    _stored_plan(store, 6)
    ids = [r.id for r in store.history(name="stored")]
    stored = store.fact_of_each(sequential.ROWS, ids)
    assert sorted(stored) == ids  # every finished experiment (of 40 runs) stored its rows
    for ident in ids:  # the same rows its report computes from its runs
        recomputed = sequential.elapsed_rows(store.experiment(ident), store.runs(ident))
        assert stored[ident] == recomputed
    from_rows = gather(store, "stored")
    [bind] = from_rows
    assert [round(p.ratio, 1) for p in bind.points] == [1.0, 1.0, 1.0, 1.3, 1.3, 1.3]
    # An experiment stored before the rows were (its fact absent) reads the same, from its runs.
    with store._write() as connection:
        from layerbench.store.schema import experiment_facts

        connection.execute(experiment_facts.delete().where(experiment_facts.c.key == sequential.ROWS.key))
    assert gather(store, "stored") == from_rows
    store.close()


def test_the_summed_cost_proposes_what_ruptures_own_l2_cost_does() -> None:
    import ruptures

    rng = np.random.default_rng(5)
    for k in range(30):
        values = [1.1 * math.exp(rng.normal(0, 0.05)) * (1.3 if k % 2 and i >= 20 else 1) for i in range(40)]
        logs = np.log(values)
        sigma = max(float(np.median(np.abs(np.diff(logs)))) / (0.6745 * math.sqrt(2)), 1e-4)
        own = ruptures.Pelt(model="l2", min_size=MIN_SEGMENT, jump=1).fit(logs.reshape(-1, 1))
        expected = [b for b in own.predict(pen=2 * sigma**2 * math.log(len(values))) if b < len(values)]
        assert change_points(values) == expected
