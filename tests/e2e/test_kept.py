"""keep_stack for real: a stream-write's repetitions on stacks built and filled once, each
run after the last one's file was removed; nothing left after the experiment, after Ctrl-C
during a run, or after kill -9 between runs and `clean`."""

import sqlite3
from pathlib import Path

import pytest
from helpers import TEST_ROOT, cli, ctrl_c_at, leftovers, leftovers_after, start_cli, wait_stopped

from layerbench.store import Store

pytestmark = pytest.mark.e2e

REPS = 3
PLAN = f"""
name = "kept"
reps = {REPS}
warmup = 0
rerun_disturbed = 0  # the run counts below are exact
baseline = "disk"
seed = 5
[stacks.disk]
layers = []
[stacks.image]
layers = [{{ kind = "image", size = "128M" }}]
[stacks.ram]
layers = [{{ kind = "tmpfs", size = "128M" }}]
[workloads.write]
kind = "stream-write"
size = "40M"
fill = 0.5
keep_stack = true
[workloads.marks]
kind = "command"
prepare = "mkdir prepared"  # once per kept stack: a second mkdir would fail
run = "sh -c 'test -d prepared && mkdir out'"  # fails unless the last run's out was removed
keep_stack = true
[workloads.files]
kind = "metadata"
files = 200
"""


def _plan(tmp_path: Path) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN)
    return path


def test_kept_stacks_are_built_and_filled_once_and_each_run_starts_cleared(
    needs_root: None, tmp_path: Path
) -> None:
    scratch, db = TEST_ROOT / "kept", tmp_path / "r.db"
    done = cli("run", str(_plan(tmp_path)), "--db", str(db), "--scratch", str(scratch), "--no-namespace")
    assert done.returncode == 0, done.stderr
    said = "keep_stack: 18 run(s) of marks, write ran on kept stacks (6 built, each serving up to 3 runs)"
    assert said in " ".join(done.stdout.split()), done.stdout
    with Store(db, read_only=True) as store:
        runs = store.runs(1)
    assert len(runs) == 3 * 3 * REPS and all(r.ok for r in runs), [r.error for r in runs if not r.ok]
    for stack in ("disk", "image", "ram"):
        writes = sorted((r for r in runs if (r.stack, r.workload) == (stack, "write")), key=lambda r: r.trial)
        assert [r.facts["kept_stack_runs_before"] for r in writes] == list(range(REPS))
        # Built and filled by the first run's trial only; every run wrote its 40 MiB afresh:
        # on the image and the tmpfs of 128M the fill (64M) and one such file fit, two do not,
        # so a run after one whose file stayed would fail for want of space.
        prepared = [r.facts.get("phase_prepare_s") for r in writes]
        assert prepared[0] is not None and prepared[1:] == [None] * (REPS - 1), prepared
        assert all(r.facts["fill_bytes"] == writes[0].facts["fill_bytes"] > 0 for r in writes)
        assert all(r.units == 40 * 2**20 for r in writes)
        files = [r for r in runs if (r.stack, r.workload) == (stack, "files")]
        assert not any("kept_stack_runs_before" in r.facts for r in files)  # fresh stacks
    assert leftovers(scratch) == [] and not list(scratch.glob("trials/*"))


def test_a_kept_stack_goes_after_ctrl_c_and_after_kill_9_and_clean(needs_root: None, tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    scratch, db = TEST_ROOT / "kept-stopped", tmp_path / "r.db"
    common = ["run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", "--no-namespace"]
    ctrl_c_at("run-started", *common)
    assert leftovers(scratch) == [], "after Ctrl-C"
    # Stopped after a run, its kept stack built, mounted and waiting for the next repetition.
    killed = start_cli(*common, env={"LAYERBENCH_STOP_AT": "run-finished"})
    wait_stopped(killed)
    assert list(scratch.glob("trials/*-kept*")), "a kept stack is there"
    killed.kill()
    killed.communicate(timeout=60)
    done = cli("clean", "--scratch", str(scratch), "--db", str(db))
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stderr
    assert leftovers_after(scratch, 10) == [], "after kill -9 and clean"
    assert not list(scratch.glob("trials/*"))
    statuses = [row[0] for row in sqlite3.connect(db).execute("SELECT status FROM experiments")]
    assert statuses == ["interrupted", "interrupted"]
