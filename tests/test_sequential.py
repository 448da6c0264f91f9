"""A time budget: looks at alpha's shares, closed comparisons, rounds where undecided."""

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from layerbench import reports, stats
from layerbench.executors.fake import FakeExecutor
from layerbench.experiment import Experiment
from layerbench.plan import parse_plan
from layerbench.plan.schedule import Trial
from layerbench.stats import sequential
from layerbench.store import Store

PLAN = """
name = "budgeted"
reps = 5
warmup = 0
baseline = "base"
budget = "{budget}"
sentinel = false
settle = 0
[stacks.base]
layers = []
[stacks.slow]
layers = []
[stacks.same]
layers = []
[stacks.vague]
layers = []
[workloads.w]
kind = "command"
run = "true"
"""


def _script(seed: int) -> Callable[[Trial], dict[str, float]]:
    rng = np.random.default_rng(seed)

    def script(trial: Trial) -> dict[str, float]:
        # slow: 30 % slower, little noise; same: equal within 0.2 %; vague: equal, 30 % noise.
        noise = {"base": 0.002, "slow": 0.002, "same": 0.002, "vague": 0.3}[trial.stack]
        effect = 1.3 if trial.stack == "slow" else 1.0
        return {"wall_s": effect * math.exp(rng.normal(0, noise))}

    return script


def _run(tmp_path: Path, budget: str, seed: int = 1) -> tuple[Store, FakeExecutor, Experiment]:
    store = Store(tmp_path / "r.db")
    executor = FakeExecutor(_script(seed))
    experiment = Experiment(parse_plan(PLAN.format(budget=budget), "plan.toml"), store, executor, seed=seed)
    experiment.prepare([])
    experiment.run()
    return store, executor, experiment


def test_decided_comparisons_close_and_only_open_ones_get_rounds(tmp_path: Path) -> None:
    store, executor, _ = _run(tmp_path, "1h")
    facts = store.experiment(1).facts
    state = sequential.STATE.read(facts)
    first = state.looks[0]
    # slow (x1.3) and same (within 0.2 %) are decided at once, vague is not.
    assert sorted(first.closed) == [("same", "w"), ("slow", "w")]
    assert first.alpha == pytest.approx(stats.ALPHA / stats.LOOKS)
    later = executor.trials[20:]
    assert later and {t.stack for t in later} == {"base", "vague"}
    # Repetitions grow by half each look: 5, 8, 12, ... until max_reps or the last look.
    assert [look.reps["w"] for look in state.looks[:3]] == [5, 8, 12]
    assert len(state.looks) <= stats.LOOKS and state.stopped is not None


def test_a_threshold_closes_a_comparison_on_either_side_of_it_not_on_the_two_sided_test(
    tmp_path: Path,
) -> None:
    """threshold = 0.5: slow (x1.3) lies wholly below x1.5 and closes at once, as does same;
    with threshold = 0.2 slow's tight interval lies wholly above x1.2 and closes too; vague's
    wide interval straddles either, so it gets the rounds."""
    for threshold in (0.5, 0.2):
        store = Store(tmp_path / f"r{threshold}.db")
        executor = FakeExecutor(_script(1))
        text = PLAN.format(budget="1h").replace('budget = "1h"', f'budget = "1h"\nthreshold = {threshold}')
        plan = parse_plan(text, "plan.toml")
        assert plan.threshold == threshold
        experiment = Experiment(plan, store, executor, seed=1)
        experiment.prepare([])
        experiment.run()
        state = sequential.STATE.read(store.experiment(1).facts)
        assert sorted(state.looks[0].closed) == [("same", "w"), ("slow", "w")]
        assert {t.stack for t in executor.trials[20:]} == {"base", "vague"}
    row = stats.Summary  # a row whose interval holds 1 + threshold stays open
    straddling = row.__new__(row)
    straddling.ratio_ci_low, straddling.ratio_ci_high = 1.1, 1.3
    assert not sequential.closes(straddling, 0.2) and sequential.closes(straddling, 0.5)
    assert sequential.closes(straddling, 0.05)


def test_the_report_shows_each_comparison_as_its_look_closed_it(tmp_path: Path) -> None:
    store, _, _ = _run(tmp_path, "1h")
    data = reports.gather(store, 1)
    slow = data.summary("slow", "w", "wall_s")
    vague = data.summary("vague", "w", "wall_s")
    assert slow is not None and vague is not None
    # slow was closed at the first look: 5 repetitions, at that look's share of alpha.
    assert slow.decision == "slower" and slow.n == 5
    assert slow.ratio_ci_level is not None and slow.ratio_ci_level >= 1 - stats.ALPHA / stats.LOOKS
    assert vague.n > 5
    # same was closed as equivalent at the first look by the two one-sided tests: its
    # interval is theirs, at 1 - 2 alpha of the row's share of that look.
    same = data.summary("same", "w", "wall_s")
    assert same is not None and same.decision == "equivalent" and same.tested_alpha is not None
    assert same.tested_alpha <= stats.ALPHA / stats.LOOKS
    assert same.ratio_ci_level == pytest.approx(1 - 2 * same.tested_alpha)
    (note,) = [w for w in data.warnings if w.startswith("sequential:")]
    assert f"spent over at most {stats.LOOKS} looks" in note and "rounds stopped:" in note
    for name in reports.load_formats():
        assert "slow" in reports.render(data, name), name


def test_a_spent_budget_stops_the_rounds(tmp_path: Path) -> None:
    store, executor, _ = _run(tmp_path, "0.001s")
    state = sequential.STATE.read(store.experiment(1).facts)
    assert state.stopped == "budget spent" and len(state.looks) == 1
    assert len(executor.trials) == 20


def test_a_budget_and_auto_reps_are_refused_together() -> None:
    from layerbench.core.errors import UserError

    text = PLAN.format(budget="8m").replace("reps = 5", 'reps = "auto"')
    with pytest.raises(UserError, match='reps = "auto" adds rounds its own way'):
        parse_plan(text, "plan.toml")


@pytest.mark.parametrize("bad", ["8", "8 m", "-1m", "8d", "eight"])
def test_a_bad_budget_names_the_key(bad: str) -> None:
    from layerbench.core.errors import UserError

    with pytest.raises(UserError, match=r"plan\.toml: budget"):
        parse_plan(PLAN.format(budget=bad), "plan.toml")


def test_durations() -> None:
    from layerbench.plan import duration_seconds

    assert duration_seconds("90s") == 90 and duration_seconds("8m") == 480
    assert duration_seconds("1.5h") == 5400 and duration_seconds("off") is None
