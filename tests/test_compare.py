"""compare's arithmetic on known samples, and the host differences."""

from pathlib import Path

import pytest

from layerbench.compare import Side, compare, flatten, host_differences


def _runs(stack: str, workload: str, walls: list[float]) -> list[dict]:
    return [
        {"stack": stack, "workload": workload, "wall_s": w, "status": "ok", "warmup": False} for w in walls
    ]


def _side(ident: int, walls: dict[tuple[str, str], list[float]], host: dict) -> Side:
    runs = [run for (s, w), values in walls.items() for run in _runs(s, w, values)]
    plan = {"stacks": {s: {} for s, _ in walls}, "workloads": {w: {} for _, w in walls}}
    experiment = {"id": ident, "name": "x", "plan": plan, "host": host}
    return Side(Path("x.db"), experiment, runs)


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
