"""Every example plan parses, in full and in --quick form."""

from pathlib import Path

import pytest

from layerbench.plan import load_plan

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.toml"))


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
