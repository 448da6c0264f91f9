"""Every example plan parses, in full and in --quick form."""

from pathlib import Path

import pytest

from layerbench.bisect.spec import BisectPlan
from layerbench.plan import load_plan

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.toml"))
BISECTS = [path for path in EXAMPLES if "\n[bisect]" in path.read_text()]
EXAMPLES = [path for path in EXAMPLES if path not in BISECTS]


def test_there_is_an_example_per_workload_kind() -> None:
    from layerbench.workloads.base import load_kinds

    kinds = {w.kind for path in EXAMPLES for w in load_plan(str(path)).workloads.values()}
    assert set(load_kinds()) <= kinds


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("quick", [False, True])
def test_example_parses(path: Path, quick: bool) -> None:
    plan = load_plan(str(path), quick=quick)
    assert plan.baseline in plan.stacks


BENCH_PLANS = sorted((Path(__file__).resolve().parents[1] / "bench").glob("*.toml"))


@pytest.mark.parametrize("path", BENCH_PLANS, ids=lambda p: p.name)
def test_the_bench_plans_parse(path: Path) -> None:
    """The plans the bench scripts and docs tell a user to run."""
    plan = load_plan(str(path))
    assert plan.baseline in plan.stacks


@pytest.mark.parametrize("path", BISECTS, ids=lambda p: p.name)
def test_a_bisect_example_makes_comparisons_that_parse(path: Path) -> None:
    plan = BisectPlan.load(str(path))
    sides = [(label, plan.stack_of(label, checkout=f"/build/{label}")) for label in ("r00-good", "r01-bad")]
    checked = plan.check_comparison(plan.comparison(sides[0], sides[1]))
    assert checked.baseline == "r00-good" and checked.threshold == plan.spec.margin
    assert "/build/r01-bad" in str(checked.stacks["r01-bad"][-1].model_dump())
