"""Bad input, Ctrl-C and kill -9: one clear line, and nothing of ours left behind."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, TEST_ROOT, cli, leftovers, leftovers_after, one_line_error, start_cli

from layerbench.scratch import Scratch

pytestmark = pytest.mark.e2e

SLOW_PLAN = """
name = "slow"
reps = 50
warmup = 0
[stacks.image]
layers = [{ kind = "image", size = "128M" }, { kind = "bind" }]
[stacks.ram]
layers = [{ kind = "tmpfs", size = "128M" }]
[workloads.files]
kind = "metadata"
files = 3000
"""


def _write(tmp_path: Path, text: str) -> Path:
    plan = tmp_path / "plan.toml"
    plan.write_text(text)
    return plan


@pytest.mark.parametrize(
    ("plan_text", "expected"),
    [
        ('name = "x"\nreps = 0\n[stacks.a]\n[workloads.w]\nkind="metadata"\n', "reps:"),
        (
            'name = "x"\n[stacks.a]\nlayers=[{kind="zfs"}]\n[workloads.w]\nkind="metadata"\n',
            "layer kind 'zfs'; valid kinds:",
        ),
        ('name = "x"\nbaseline="b"\n[stacks.a]\n[workloads.w]\nkind="metadata"\n', "names no stack"),
        (
            'name = "x"\n[stacks.a]\n[workloads.w]\nkind="extract"\narchive="/no/such.tar"\n',
            "no such archive file",
        ),
        (
            'name = "x"\n[stacks.a]\nlayers=[{kind="tmpfs",size="lots"}]\n[workloads.w]\nkind="metadata"\n',
            "is not a size",
        ),
        ("this is not toml", "not valid TOML"),
    ],
)
def test_bad_plans_exit_2_with_one_line(tmp_path: Path, plan_text: str, expected: str) -> None:
    db = tmp_path / "r.db"
    line = one_line_error(
        cli("run", str(_write(tmp_path, plan_text)), "--db", str(db), "--scratch", str(tmp_path / "s"))
    )
    assert expected in line and str(tmp_path / "plan.toml") in line
    assert not db.exists(), "bad input must write nothing"


def test_other_bad_input(tmp_path: Path) -> None:
    assert "no such plan file" in one_line_error(cli("run", str(tmp_path / "nope.toml")))
    assert "refusing '/'" in one_line_error(cli("run", "--scratch", "/", "--db", str(tmp_path / "r.db")))
    assert "no results database" in one_line_error(cli("report", "--db", str(tmp_path / "x")))


def test_missing_tool_names_the_package(tmp_path: Path) -> None:
    plan = _write(
        tmp_path, 'name = "x"\n[stacks.a]\nlayers=[{kind="image",fs="xfs"}]\n[workloads.w]\nkind="metadata"\n'
    )
    env_path = tmp_path / "bin"
    env_path.mkdir()
    for tool in ("mount", "umount", "losetup", "sh", "dd", "sync", "tar"):
        found = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        if found:
            (env_path / tool).symlink_to(found)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerbench",
            "run",
            str(plan),
            "--db",
            str(tmp_path / "r.db"),
            "--scratch",
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "PATH": str(env_path)},
    )
    if os.geteuid() != 0:
        pytest.skip("needs root to reach the tool check")
    line = one_line_error(done)
    assert "mkfs.xfs" in line and "apt-get install xfsprogs" in line


def _start(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], Path, Path]:
    from helpers import TEST_ROOT

    scratch = TEST_ROOT / f"interrupt-{tmp_path.name}"
    db = tmp_path / "r.db"
    child = start_cli(
        "run", str(_write(tmp_path, SLOW_PLAN)), "--db", str(db), "--scratch", str(scratch), "--quiet", *extra
    )
    return child, scratch, db


def _wait_for_runs(db: Path, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if db.exists():
            try:
                found = sqlite3.connect(db).execute("SELECT count(*) FROM runs").fetchone()[0]
            except sqlite3.OperationalError:
                found = 0
            if found >= count:
                return
        time.sleep(0.1)
    raise AssertionError("the run never got going")


def _wait_for_mounts(scratch: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any("mount" in item for item in leftovers(scratch)):
            return
        time.sleep(0.01)
    raise AssertionError("no mount appeared")


def test_ctrl_c_tears_down_and_keeps_finished_runs(needs_root: None, tmp_path: Path) -> None:
    child, scratch, db = _start(tmp_path, "--no-namespace")
    _wait_for_runs(db, 3)
    _wait_for_mounts(scratch)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert leftovers(scratch) == []
    connection = sqlite3.connect(db)
    assert connection.execute("SELECT status FROM experiments").fetchone()[0] == "interrupted"
    assert connection.execute("SELECT count(*) FROM runs").fetchone()[0] >= 3


def test_kill_9_then_clean_leaves_nothing(needs_root: None, tmp_path: Path) -> None:
    child, scratch, db = _start(tmp_path, "--no-namespace")
    _wait_for_runs(db, 2)
    _wait_for_mounts(scratch)
    child.kill()
    child.communicate(timeout=60)
    assert leftovers(scratch), "the kill should have left mounts to clean"
    done = cli("clean", "--scratch", str(scratch), "--db", str(db), check=True)
    assert "unmounted" in done.stdout and "marked interrupted" in done.stdout
    assert leftovers(scratch) == []
    assert [p.name for p in scratch.iterdir()] != [] and not (scratch / "trials").exists()
    connection = sqlite3.connect(db)
    assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert connection.execute("SELECT status FROM experiments").fetchone()[0] == "interrupted"
    assert connection.execute("SELECT count(*) FROM runs").fetchone()[0] >= 2


def test_kill_9_in_a_private_namespace_leaks_nothing(needs_root: None, tmp_path: Path) -> None:
    child, scratch, db = _start(tmp_path)
    _wait_for_runs(db, 2)
    assert not any("mount" in i for i in leftovers(scratch)), "mounts must stay private"
    child.kill()
    child.communicate(timeout=60)
    # The kernel drops the namespace's mounts and autoclear loop devices by itself.
    assert leftovers_after(scratch, 5) == []
    # The next run recovers the journal's files and marks the killed experiment.
    done = cli("clean", "--scratch", str(scratch), "--db", str(db), check=True)
    assert "marked interrupted" in done.stdout and leftovers(scratch) == []


def test_clean_exits_1_naming_what_it_cannot_remove(needs_root: None, scratch_root: Path) -> None:
    scratch = Scratch(scratch_root)
    workdir = scratch.new_dir("trials", "e1-t0")
    (workdir / "file").write_text("x")
    subprocess.run(["chattr", "+i", str(workdir / "file")], check=True)
    try:
        done = cli("clean", "--scratch", str(scratch_root), "--db", str(scratch_root / "none.db"))
    finally:
        subprocess.run(["chattr", "-i", str(workdir / "file")], check=True)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stdout + done.stderr
    problems = [line for line in done.stderr.splitlines() if line.startswith("clean: cannot remove")]
    assert len(problems) == 1 and str(workdir) in problems[0], done.stderr
    assert cli("clean", "--scratch", str(scratch_root), check=True).returncode == 0


def test_an_internal_error_is_one_line_and_a_log_file(needs_root: None, tmp_path: Path) -> None:
    """A bug mid-run is one line naming the log that holds the traceback, never the
    traceback itself; everything built is torn down all the same."""
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'name = "bug"\nreps = 1\nwarmup = 0\n[stacks.ram]\nlayers = [{ kind = "tmpfs", size = "16M" }]\n'
        '[workloads.files]\nkind = "metadata"\nfiles = 10\n'
    )
    scratch = TEST_ROOT / f"bug-{tmp_path.name}"
    env = {**os.environ, "LAYERBENCH_LOG_DIR": str(tmp_path), "LAYERBENCH_RAISE_AT": "stack-built"}
    db = tmp_path / "r.db"
    done = cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", env=env)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    lines = [line for line in done.stderr.splitlines() if line.startswith("layerbench: internal error")]
    assert len(lines) == 1 and "injected at stack-built" in lines[0], done.stderr
    log = Path(lines[0].rsplit("traceback in ", 1)[1].rstrip(")"))
    assert log.parent == tmp_path and "Traceback" in log.read_text()
    assert leftovers(scratch) == []


def test_clean_removes_a_mount_planted_under_trials_and_says_so(needs_root: None, scratch_root: Path) -> None:
    scratch = Scratch(scratch_root)
    planted = scratch.root / "trials" / "by-hand"
    planted.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "by-hand", str(planted)], check=True)
    done = cli("clean", "--scratch", str(scratch_root), "--db", str(scratch_root / "none.db"))
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert f"unmounted {planted} (not in the journal: tmpfs from by-hand)" in done.stdout
    assert leftovers(scratch_root) == []
