"""`layerbench bisect` for real: a git repository of 16 commits of a small FUSE passthrough
(fusepy), each revision cloned and built under the scratch root, each comparison an
experiment of the revision's daemon against the current good end's."""

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import TEST_ROOT, cli, leftovers, leftovers_after, start_cli

from layerbench.scratch import placement

pytestmark = pytest.mark.e2e

MAKE_REPO = Path(__file__).resolve().parents[2] / "examples" / "bisect-fuse" / "make_repo.py"
BUDGET_S = 60
# The planted delay (0.2 ms before each of the 4 KiB writes FUSE hands the daemon) makes an 8M
# stream-write about 5 times slower; a margin of 1 decides that, and its absence against the
# Python daemon's noise, in the first rounds. The tests are of the search on a real system,
# not of fine measurement: no sentinel, no settle wait, no memory held warm, which keeps a
# bisect of 16 commits under a minute. The writer (cpus) and the daemon (taskset) share one
# CPU: on this 2-vCPU VM an 8M write through the daemon took 0.025 s with both on one CPU
# and 0.19-0.22 s on two (each 4 KiB write a wakeup across vCPUs), and left to the scheduler
# 0.025-0.2 s from run to run, so like-for-like steps ran all their looks (27 repetitions).
PLAN = f"""
name = "bisect-e2e"
warmup = 0
reps = 3
rerun_disturbed = 0
seed = 11
sentinel = false
settle = 0
warm_memory = false
cpus = [0]
[bisect]
repo = "repo"
build = "{sys.executable} -m py_compile passthrough.py"
margin = 1.0
budget = "{BUDGET_S}s"
probes = 1
[stacks.fs]
layers = [
  {{ kind = "tmpfs", size = "64M" }},
  {{ kind = "fuse-daemon", command = [
    "taskset", "-c", "0", "{sys.executable}", "{{checkout}}/passthrough.py", "{{source}}", "{{target}}"
  ] }},
]
[workloads.write]
kind = "stream-write"
size = "8M"
"""


def _setup(tmp_path: Path, *history: str, plan: str = PLAN) -> Path:
    pytest.importorskip("fuse", reason="the test daemon is written with fusepy")
    subprocess.run(
        [sys.executable, str(MAKE_REPO), str(tmp_path / "repo"), *history], check=True, capture_output=True
    )
    (tmp_path / "plan.toml").write_text(plan)
    return tmp_path / "plan.toml"


def _state(db: Path, ident: int = 1) -> tuple[str, dict]:
    status, state = (
        sqlite3.connect(db)
        .execute("SELECT status, state_json FROM bisects WHERE id = ?", (ident,))
        .fetchone()
    )
    return status, json.loads(state)


def _found(state: dict) -> list[tuple[int, str, bool | None]]:
    return [(b["first"], b["direction"], b["confirmed"]) for b in state["boundaries"]]


def test_the_commit_that_adds_a_delay_per_write_is_found(needs_root: None, tmp_path: Path) -> None:
    plan = _setup(tmp_path)
    db, scratch = tmp_path / "r.db", TEST_ROOT / "bisect-one"
    began = time.monotonic()
    done = cli(
        "bisect", str(plan), "--good", "c00", "--bad", "c15", "--db", str(db), "--scratch", str(scratch)
    )
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    status, state = _state(db)
    assert status == "done" and _found(state) == [(11, "slower", True)], state["steps"]
    assert state["variants"][11]["title"] == "c11: wait 0.2 ms before each write"
    assert took < 600, f"{took:.0f} s"
    for step in state["steps"]:
        # A look adds rounds only while the time left of the budget holds them: a step ends
        # within its budget and one round of two trials (about 5 s here) beyond it.
        assert step["seconds"] < BUDGET_S + 30, step
    assert "slower at r11-" in done.stdout and "c11: wait 0.2 ms" in done.stdout
    assert "Why (the first bad variant against its parent)" in done.stdout
    # Nothing but the root's own files: the checkouts went with the bisect.
    assert leftovers(scratch) == []
    assert {p.name for p in scratch.iterdir()} <= {".layerbench-scratch", "lock", placement.STATE}
    # Stored: the report reads it again, in every format; each comparison is an experiment.
    again = cli("report", "--bisect", "1", "--db", str(db), "--format", "json", check=True)
    assert json.loads(again.stdout)["bisect"]["state"]["boundaries"][0]["first"] == 11
    assert (
        "slower at r11-"
        in cli("report", "--bisect", "1", "--db", str(db), "--format", "markdown", check=True).stdout
    )
    confirmation = next(s for s in state["steps"] if (s["reference"], s["candidate"]) == (10, 11))
    shown = cli("report", str(confirmation["experiment"]), "--db", str(db), check=True).stdout
    assert "slower" in shown


def test_a_history_that_goes_back_and_up_again_reports_each_step_and_resumes_after_kill_9(
    needs_root: None, tmp_path: Path
) -> None:
    # 8 commits, not 16: three boundaries to find and confirm, each a step fewer.
    plan = _setup(tmp_path, "--commits", "8", "--slower", "2", "--faster", "4", "--slower", "6")
    db, scratch = tmp_path / "r.db", TEST_ROOT / "bisect-back"
    child = start_cli(
        "bisect", str(plan), "--good", "c00", "--bad", "c07", "--db", str(db), "--scratch", str(scratch)
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and child.poll() is None:
        if db.exists() and len(_state_or_empty(db)) >= 3:
            break
        time.sleep(0.5)
    assert child.poll() is None, child.communicate()
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    before = _state(db)[1]["steps"]
    cleaned = cli("clean", "--scratch", str(scratch), "--db", str(db), check=True)
    assert leftovers_after(scratch, 10) == [], cleaned.stdout
    assert _state(db)[0] == "interrupted"
    assert "not finished (interrupted)" in cli("report", "--bisect", "1", "--db", str(db), check=True).stdout
    resumed = cli("bisect", "--resume", "1", "--db", str(db), "--scratch", str(scratch))
    assert resumed.returncode == 0, resumed.stderr
    status, state = _state(db)
    assert status == "done"
    assert _found(state) == [(2, "slower", True), (4, "faster", True), (6, "slower", True)], state["steps"]
    assert state["steps"][: len(before)] == before, "a finished comparison was measured again"
    assert "the cost changed 3 times between the ends" in resumed.stdout
    assert leftovers(scratch) == []


def _state_or_empty(db: Path) -> list[dict]:
    try:
        return _state(db)[1]["steps"]
    except (sqlite3.Error, TypeError):
        return []


def test_ends_that_do_not_differ_stop_at_the_start(needs_root: None, tmp_path: Path) -> None:
    plan = _setup(tmp_path, "--faster", "3")  # no commit adds the delay
    db, scratch = tmp_path / "r.db", TEST_ROOT / "bisect-same"
    done = cli(
        "bisect", str(plan), "--good", "c00", "--bad", "c15", "--db", str(db), "--scratch", str(scratch)
    )
    assert done.returncode == 0, done.stderr
    status, state = _state(db)
    assert (status, state["ends"], len(state["steps"]), state["boundaries"]) == ("done", "not slower", 1, [])
    assert "nothing to bisect" in done.stdout


@pytest.mark.parametrize(
    ("arguments", "change", "message"),
    [
        (("--good", "v9", "--bad", "c15"), None, "--good v9: not a revision of"),
        (("--good", "c15", "--bad", "c00"), None, "--good c15 comes after --bad c00: swapped?"),
        (
            ("--good", "c00", "--bad", "c15"),
            ("-m py_compile passthrough.py", "-c 'raise SystemExit(1)'"),
            "does not build",
        ),
        (("--good", "c00"), None, "give a PLAN, --good and --bad"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    needs_root: None, tmp_path: Path, arguments: tuple[str, ...], change: tuple[str, str] | None, message: str
) -> None:
    plan = _setup(tmp_path, plan=PLAN.replace(*change) if change else PLAN)
    scratch = TEST_ROOT / "bisect-bad"
    done = cli("bisect", str(plan), *arguments, "--db", str(tmp_path / "r.db"), "--scratch", str(scratch))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert leftovers(scratch) == []
