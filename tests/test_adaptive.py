"""reps = "auto": rounds are added until every ratio's CI is narrow enough, or max_reps."""

import json
from pathlib import Path

import pytest
from helpers import cli

from layerbench.core.runs import RunRecord
from layerbench.stats import adaptive


def _runs(values: dict[str, list[float]]) -> list[RunRecord]:
    return [
        RunRecord.from_row({"stack": stack, "workload": "w", "rep": rep, "status": "ok", "wall_s": value})
        for stack, series in values.items()
        for rep, value in enumerate(series)
    ]


def _round(values: dict[str, list[float]], max_reps: int = 30) -> tuple[list, dict]:
    return adaptive.next_round(
        _runs(values),
        baseline="a",
        stacks=["a", "b"],
        workloads=["w"],
        target=0.02,
        max_reps=max_reps,
        seed=1,
    )


def test_tight_ratios_need_no_more_rounds() -> None:
    trials, state = _round({"a": [1.0, 1.001, 0.999, 1.0, 1.002], "b": [2.0, 2.001, 1.999, 2.0, 2.002]})
    assert trials == [] and state["converged"] and state["reps_used"] == {"w": 5}


NOISY_A_A = {"a": [1.0, 1.3, 0.8, 1.1, 0.9], "b": [1.05, 1.1, 0.95, 1.2, 0.85]}


def test_a_decided_ratio_needs_no_more_rounds() -> None:
    trials, state = _round({"a": [1.0, 1.3, 0.8, 1.1, 0.9], "b": [2.0, 2.5, 1.6, 2.2, 1.9]})
    assert trials == [] and state["converged"]
    assert state["widths"][0].decision == "slower"


def test_undecided_ratios_get_another_interleaved_round() -> None:
    trials, state = _round(NOISY_A_A)
    assert sorted(trials) == [("a", "w", 5), ("b", "w", 5)]
    assert not state["converged"] and state["not_converged"][0].stack == "b"
    assert (state["not_converged"][0].half_width or 0) > 0.02


def test_max_reps_stops_the_rounds_and_says_what_did_not_converge() -> None:
    trials, state = _round(NOISY_A_A, max_reps=5)
    assert trials == [] and not state["converged"]
    (note,) = adaptive.notes({adaptive.STATE.key: adaptive.as_fact(state)})
    assert "undecided and not within +-2.0%" in note and "b/w" in note and "max_reps = 5" in note


def test_only_undecided_stacks_and_the_baseline_run_again() -> None:
    values = {**NOISY_A_A, "c": [3.0, 3.9, 2.4, 3.3, 2.7]}
    trials, _ = adaptive.next_round(
        _runs(values), baseline="a", stacks=["a", "b", "c"], workloads=["w"], target=0.02, max_reps=30, seed=1
    )
    assert sorted(trials) == [("a", "w", 5), ("b", "w", 5)]


# A stable plan: the time is set by a throttle (64 MiB at 64 MiB/s, 1 s), not by the machine;
# the cold start of each run after dropped caches is a small part of it.
THROTTLED = (
    '{ kind = "tmpfs", size = "256M" }, { kind = "image", size = "192M" }, '
    '{ kind = "throttle", write_bps = "64M" }'
)


def _plan(tmp_path: Path, target: float, max_reps: int, decide: str = "", size: str = "64M") -> Path:
    plan = tmp_path / "auto.toml"
    plan.write_text(
        f"""
name = "auto"
reps = "auto"
rerun_disturbed = 0  # the run counts below are exact
max_reps = {max_reps}
target_ci = {target}
{decide}
warmup = 1
[stacks.a]
layers = [{THROTTLED}]
[stacks.b]
layers = [{THROTTLED}]
[workloads.write]
kind = "stream-write"
size = "{size}"
direct = true
"""
    )
    return plan


@pytest.mark.e2e
def test_auto_reps_converge_on_a_stable_plan(needs_root: None, scratch_root: Path, tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    cli(
        "run",
        str(_plan(tmp_path, 0.05, 12)),
        "--db",
        str(db),
        "--scratch",
        str(scratch_root),
        "--quiet",
        check=True,
    )
    report = json.loads(cli("report", "--db", str(db), "--format", "json", check=True).stdout)
    state = report["experiment"]["facts"]["adaptive_reps"]
    assert state["converged"], state
    assert 5 <= state["reps_used"]["write"] <= 12
    measured = [r for r in report["runs"] if not r["warmup"]]
    assert len(measured) == 2 * state["reps_used"]["write"]
    assert any('reps = "auto": repetitions used per workload: write' in w for w in report["warnings"])


@pytest.mark.e2e
def test_auto_reps_stop_at_max_reps(needs_root: None, scratch_root: Path, tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    # Nothing can be decided: no equivalence margin, and a level no A/A comparison reaches;
    # so the runs need not be steady, only counted (16M at 64 MB/s: a quarter second each).
    plan = _plan(tmp_path, 0.0001, 6, decide="equivalence = 0\nalpha = 1e-12", size="16M")
    cli("run", str(plan), "--db", str(db), "--scratch", str(scratch_root), "--quiet", check=True)
    report = json.loads(cli("report", "--db", str(db), "--format", "json", check=True).stdout)
    state = report["experiment"]["facts"]["adaptive_reps"]
    assert not state["converged"] and state["reps_used"] == {"write": 6}
    assert [w["stack"] for w in state["not_converged"]] == ["b"]
    text = cli("report", "--db", str(db), check=True).stdout
    assert "max_reps = 6" in text
