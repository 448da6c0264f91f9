"""The drift sentinel's probe, its place in an experiment, and the drift it reads."""

from pathlib import Path

import pytest

from layerbench.analysis import drift
from layerbench.executors.fake import FakeExecutor
from layerbench.experiment import Experiment
from layerbench.observe import sentinel
from layerbench.observe.sentinel import Sample
from layerbench.plan import parse_plan
from layerbench.store import Store


def test_the_probe_measures_every_part_and_leaves_its_directory_empty(tmp_path: Path) -> None:
    parts, cost = sentinel.probe(tmp_path)
    assert set(parts) == set(sentinel.PARTS)
    assert all(0 < seconds < 5 for seconds in parts.values())
    assert cost >= sum(parts.values()) * 0.99
    assert list(tmp_path.iterdir()) == []


def test_the_budget_spaces_the_probes() -> None:
    assert sentinel.due(since_last_s=10, last_cost_s=0.1)
    assert not sentinel.due(since_last_s=4, last_cost_s=0.1)


PLAN = """
name = "drift"
reps = 6
warmup = 1
seed = 2
[stacks.a]
layers = []
[stacks.b]
layers = []
[workloads.w]
kind = "metadata"
files = 10
"""


def test_an_experiment_probes_before_between_rounds_and_after(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    executor = FakeExecutor(lambda trial: {"wall_s": 1.0}, sentinel=lambda n: {"cpu": 0.02, "memory": 0.05})
    experiment = Experiment(parse_plan(PLAN, "t.toml"), store, executor)
    experiment.prepare([])
    experiment.run()
    probes = store.sentinels(1)
    # The fake's probes cost nothing, so the budget never delays them: one before the first
    # trial and one after each of the 14, the last of which is the end's.
    assert [p.after_trial for p in probes] == [None, *range(14)]
    assert [p.seq for p in probes] == list(range(15)) and probes[0].parts == {"cpu": 0.02, "memory": 0.05}


def test_an_experiment_over_before_the_budget_allows_a_second_probe_is_probed_once(tmp_path: Path) -> None:
    """A probe that cost 1 s may come again 50 s later (2 % of the time); the fake's trials
    take no time, so the experiment ends long before: the end's probe is not due either."""
    store = Store(tmp_path / "r.db")
    executor = FakeExecutor(lambda trial: {"wall_s": 1.0}, sentinel=lambda n: {"cpu": 0.02}, probe_cost_s=1.0)
    experiment = Experiment(parse_plan(PLAN, "t.toml"), store, executor)
    experiment.prepare([])
    experiment.run()
    assert [p.after_trial for p in store.sentinels(1)] == [None] and executor.probes == 1


def test_a_plan_can_turn_the_sentinel_off(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    executor = FakeExecutor(lambda trial: {"wall_s": 1.0}, sentinel=lambda n: {"cpu": 0.02})
    experiment = Experiment(
        parse_plan(PLAN + "", "t.toml").model_copy(update={"sentinel": False}), store, executor
    )
    experiment.prepare([])
    experiment.run()
    assert store.sentinels(1) == [] and executor.probes == 0


def _samples(values: list[float], part: str = "memory") -> list[Sample]:
    return [
        Sample(i, "2026-12-01T10:00:00+00:00", i, {part: v, "cpu": 0.02 + 0.0001 * (i % 3)})
        for i, v in enumerate(values)
    ]


def test_a_step_in_memory_is_named_and_steady_parts_are_not() -> None:
    before = [0.05 + 0.0003 * (i % 5) for i in range(8)]
    moves = drift.within(_samples(before + [4 * v for v in before]))
    by_part = {m.part: m for m in moves}
    assert by_part["memory"].moved and by_part["memory"].ratio == pytest.approx(4.0, rel=0.1)
    assert not by_part["cpu"].moved
    line = drift.sentence(moves, where="during the experiment")
    assert line and "memory (first touch of fresh pages) x4" in line and "CPU" not in line


def test_noise_without_a_trend_is_not_drift() -> None:
    noise = [0.05, 0.06, 0.045, 0.055, 0.05, 0.058, 0.047, 0.052]
    assert drift.moved(drift.within(_samples(noise + noise[::-1]))) == []


def test_a_small_real_shift_is_not_material() -> None:
    """Significant but within x1.25: not called drift."""
    values = [0.050 + 0.0001 * i for i in range(10)]
    (memory,) = [m for m in drift.within(_samples(values)) if m.part == "memory"]
    assert memory.p_adjusted < 0.05 and not memory.moved


def test_between_two_experiments_names_the_part_with_its_interval() -> None:
    a = _samples([0.05, 0.051, 0.049, 0.05, 0.052, 0.048])
    b = _samples([0.12, 0.125, 0.118, 0.121, 0.119, 0.122])
    (memory,) = [m for m in drift.between(a, b) if m.part == "memory"]
    assert memory.moved and memory.low is not None and memory.high is not None
    assert memory.low <= memory.ratio <= memory.high and memory.low > 2
    assert memory.ratio == pytest.approx(2.42, rel=0.05)


def test_too_few_probes_compare_nothing() -> None:
    assert drift.between(_samples([0.05, 0.05]), _samples([0.1, 0.1])) == []


def test_an_unsteady_cpu_is_named_with_its_spread_and_a_steady_one_is_not() -> None:
    steady = _samples([0.05] * 8)  # its cpu part varies by well under 1 %
    assert drift.unsteady_sentence(steady) is None
    found = drift.cpu_steadiness(steady)
    assert found is not None and found.cv < 0.01
    unsteady = _samples([0.05] * 8, part="memory")
    for sample, cpu in zip(unsteady, [0.055, 0.11, 0.06, 0.10, 0.052, 0.083, 0.09, 0.058], strict=True):
        sample.parts["cpu"] = cpu
    line = drift.unsteady_sentence(unsteady)
    assert line is not None and "52-110 ms" in line and "CV 30 %" in line and "8 probes" in line
    assert drift.cpu_steadiness(unsteady[:3]) is None  # too few probes to say
