"""Kept stacks (a workload's keep_stack): what a run added is cleared and the preparation
stays; every kept stack is torn down at the end, even when one teardown fails."""

import contextlib
from pathlib import Path
from typing import Any

import pytest

from layerbench.core.runs import RunRecord
from layerbench.executors import kept


def _kept(top: Path, closed: list[str], name: str = "s", fail: bool = False) -> kept.Kept:
    resources = contextlib.ExitStack()

    def teardown() -> None:
        closed.append(name)
        if fail:
            raise OSError(f"{name}: device busy")

    resources.callback(teardown)
    built: Any = type("Built", (), {"top": str(top)})()
    return kept.Kept(resources, None, built, [], None, None, frozenset(p.name for p in top.iterdir()))  # type: ignore[arg-type]


def test_a_clear_removes_what_the_run_added_and_keeps_the_preparation(tmp_path: Path) -> None:
    (tmp_path / "fill-0").write_bytes(b"f" * 4096)  # the workload's preparation
    (tmp_path / "stage").mkdir()
    on = _kept(tmp_path, [])
    (tmp_path / "out").write_bytes(b"o")  # what a run wrote
    tree = tmp_path / "tree" / "a" / "b"
    tree.mkdir(parents=True)
    (tree / "f").write_text("x")
    (tmp_path / "link").symlink_to("/etc")  # removed, never followed
    on.clear()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fill-0", "stage"]
    assert Path("/etc").is_dir()


def test_every_kept_stack_is_torn_down_even_when_one_fails(tmp_path: Path) -> None:
    stacks, closed = kept.KeptStacks(), []
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        stacks.add((1, name, "w"), _kept(tmp_path / name, closed, name, fail=name == "b"))
    with pytest.raises(OSError, match="b: device busy"):
        stacks.close()
    assert closed == ["c", "b", "a"]  # the last kept first, and a failure stops none
    assert stacks.get((1, "a", "w")) is None


def test_a_new_experiment_lets_the_last_ones_stacks_go(tmp_path: Path) -> None:
    stacks, closed = kept.KeptStacks(), []
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    stacks.add((1, "s", "w"), _kept(tmp_path / "old", closed, "old"))
    stacks.add((2, "s", "w"), _kept(tmp_path / "new", closed, "new"))
    stacks.only_for(2)
    assert closed == ["old"] and stacks.get((2, "s", "w")) is not None


def test_the_reports_say_which_runs_ran_on_kept_stacks() -> None:
    runs = [
        RunRecord(i, stack, "write", "ok", rep=i, facts={kept.RUNS_BEFORE.key: i})
        for stack in ("a", "b")
        for i in range(3)
    ]
    fresh = RunRecord(9, "a", "untar", "ok")
    [note] = kept.notes([*runs, fresh])
    assert note.startswith("keep_stack: 6 run(s) of write ran on kept stacks (2 built, each serving up to 3")
    assert kept.notes([fresh]) == []
