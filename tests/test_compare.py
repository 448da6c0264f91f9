"""compare's arithmetic on known samples, and the host differences."""

from pathlib import Path

import pytest
from helpers import experiment_record

from layerbench.analysis.compare import Side, compare, flatten, host_differences
from layerbench.core.runs import RunRecord
from layerbench.observe.sentinel import Sample


def _runs(stack: str, workload: str, walls: list[float]) -> list[RunRecord]:
    return [
        RunRecord.from_row({"stack": stack, "workload": workload, "wall_s": w, "status": "ok", "rep": rep})
        for rep, w in enumerate(walls)
    ]


def _side(
    ident: int, walls: dict[tuple[str, str], list[float]], host: dict, sentinels: list[Sample] = ()
) -> Side:
    runs = [run for (s, w), values in walls.items() for run in _runs(s, w, values)]
    plan = {"stacks": {s: [] for s, _ in walls}, "workloads": {w: {} for _, w in walls}}
    baseline = next(iter(walls))[0]
    experiment = experiment_record(id=ident, name="x", plan=plan, host=host, baseline=baseline)
    return Side(Path("x.db"), experiment, runs, list(sentinels))


def _probes(memory_s: float, count: int = 6) -> list[Sample]:
    return [
        Sample(i, "t", i, {"cpu": 0.025 * (1 + 0.01 * (i % 3)), "memory": memory_s * (1 + 0.02 * (i % 3))})
        for i in range(count)
    ]


def test_a_host_twice_as_slow_cancels_in_the_relative_costs_and_is_named() -> None:
    """Every stack of B pays the same x2 (the host changed): the relative costs agree, the
    absolute ones all read slower, and the drift line names the baseline and the sentinel."""
    rounds = [1.0, 1.1, 0.9, 1.05, 0.95, 1.02, 0.98]
    a_walls = {("disk", "w"): rounds, ("image", "w"): [2 * v for v in rounds]}
    b_walls = {
        key: [2 * v * (1 + 0.01 * (i % 2)) for i, v in enumerate(values)] for key, values in a_walls.items()
    }
    result = compare(_side(1, a_walls, {}, _probes(0.03)), _side(2, b_walls, {}, _probes(0.075)))
    assert all(row.decision == "slower" for row in result.rows)
    (relative,) = result.relative
    assert relative.stack == "image" and not relative.significant
    assert relative.ratio == pytest.approx(1.0, abs=0.02)
    assert result.agreeing() == (1, 1)
    line = result.drift.line()
    assert (
        line
        and "baseline's elapsed time moved x2." in line
        and "memory" in line
        and "cpu" not in line.lower()
    )
    assert result.drift.host_changed and result.drift.as_dict()["host_changed"]


def test_a_layer_that_got_dearer_shows_in_the_relative_costs_and_the_host_did_not_move() -> None:
    rounds = [1.0, 1.1, 0.9, 1.05, 0.95, 1.02, 0.98]
    a_walls = {("disk", "w"): rounds, ("image", "w"): [1.5 * v for v in rounds]}
    b_walls = {("disk", "w"): rounds, ("image", "w"): [2.25 * v for v in rounds]}
    result = compare(_side(1, a_walls, {}, _probes(0.03)), _side(2, b_walls, {}, _probes(0.03)))
    (relative,) = result.relative
    assert relative.decision == "slower" and relative.ratio == pytest.approx(1.5, rel=0.02)
    assert relative.ratio_ci_low > 1
    assert not result.drift.host_changed and result.drift.line() is None


def test_b_twice_as_slow_as_a() -> None:
    a = _side(1, {("disk", "w"): [1.0, 1.1, 0.9, 1.0, 1.05]}, {"kernel": "6.1"})
    b = _side(2, {("disk", "w"): [2.0, 2.2, 1.8, 2.0, 2.1]}, {"kernel": "6.18"})
    result = compare(a, b)
    (row,) = result.rows
    assert row.ratio == pytest.approx(2.0, rel=0.01) and row.ratio_ci_low <= 2.0 <= row.ratio_ci_high
    assert row.ratio_ci_low > 1.5 and row.verdict == "slower" and row.p_adjusted < 0.05
    assert result.host_differences == [("kernel", "6.1", "6.18")]


def test_same_samples_no_difference() -> None:
    walls = {("disk", "w"): [1.0, 1.2, 0.9, 1.1]}
    row = compare(_side(1, walls, {}), _side(2, walls, {})).rows[0]
    assert row.ratio == pytest.approx(1.0) and not row.significant
    assert row.verdict.startswith("inconclusive: [") or row.verdict.startswith("equivalent")


def test_pairs_only_on_one_side() -> None:
    a = _side(1, {("disk", "w"): [1.0, 1.0], ("ram", "w"): [0.5, 0.5]}, {})
    b = _side(2, {("disk", "w"): [1.0, 1.0]}, {})
    result = compare(a, b)
    assert [(r.stack, r.workload) for r in result.rows] == [("disk", "w")]
    assert result.only_in_a == [("ram", "w")] and result.plans_differ


def test_nested_host_keys() -> None:
    a = {"disks": [{"name": "vda", "scheduler": "mq-deadline"}], "scratch_fs": {"type": "ext4"}}
    b = {"disks": [{"name": "vda", "scheduler": "none"}], "scratch_fs": {"type": "ext4"}}
    assert flatten(a)["disks.0.scheduler"] == "mq-deadline"
    assert host_differences(a, b) == [("disks.0.scheduler", "mq-deadline", "none")]
