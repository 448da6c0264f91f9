"""Crash recovery, resume, the lock, faults during runs, and real block devices."""

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from helpers import (
    TEST_ROOT,
    agent_answers,
    cli,
    ctrl_c_at,
    leftovers,
    leftovers_after,
    one_line_error,
    other_loop_scheduler,
    start_agent,
    start_cli,
    stopped_agent,
    wait_stopped,
)

pytestmark = pytest.mark.e2e

PLAN = """
name = "recover"
reps = 2
rerun_disturbed = 0  # the run counts below are exact
warmup = 0
seed = 3
[stacks.image]
layers = [{ kind = "image", size = "64M" }, { kind = "bind" }]
[stacks.ram]
layers = [{ kind = "tmpfs", size = "64M" }]
[workloads.write]
kind = "stream-write"
size = "8M"
[workloads.nap]
kind = "command"
run = "sleep 0.3"
"""
TRIALS = 2 * 2 * 2


def _plan(tmp_path: Path, text: str = PLAN) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def _db_facts(db: Path) -> tuple[str, int, str]:
    connection = sqlite3.connect(db)
    status = connection.execute("SELECT status FROM experiments").fetchone()[0]
    runs = connection.execute("SELECT count(*) FROM runs").fetchone()[0]
    integrity = connection.execute("PRAGMA integrity_check").fetchone()[0]
    return status, runs, integrity


@pytest.mark.parametrize("point", ["stack-built", "run-started", "run-finished", "teardown"])
@pytest.mark.parametrize("namespace", [False, True], ids=["host-namespace", "private-namespace"])
def test_kill_9_anywhere_then_clean_and_resume(
    needs_root: None, tmp_path: Path, point: str, namespace: bool
) -> None:
    scratch = TEST_ROOT / f"kill-{point}-{namespace}"
    db = tmp_path / "r.db"
    extra = [] if namespace else ["--no-namespace"]
    # One repetition: every stop point is in the first trial, so the resume still has to
    # finish that one and run the other three; a second round would only repeat them.
    child = start_cli(
        "run",
        str(_plan(tmp_path, PLAN.replace("reps = 2", "reps = 1"))),
        "--db",
        str(db),
        "--scratch",
        str(scratch),
        "--quiet",
        *extra,
        env={"LAYERBENCH_STOP_AT": point},
    )
    wait_stopped(child)
    if point == "run-started":  # GNU time's file is in the trial's directory, not in /tmp
        assert list(scratch.glob("trials/*/layerbench-rss-*"))
    child.kill()
    child.communicate(timeout=60)
    if not namespace and point in ("stack-built", "run-started"):
        assert any("mount" in item for item in leftovers(scratch)), "a mount should be left to clean"
    done = cli("clean", "--scratch", str(scratch), "--db", str(db), check=True)
    assert "marked interrupted" in done.stdout
    assert leftovers(scratch) == [], done.stdout
    assert not (scratch / "trials").exists()
    status, runs_before, integrity = _db_facts(db)
    assert (status, integrity) == ("interrupted", "ok")
    resumed = cli("run", "--resume", "1", "--db", str(db), "--scratch", str(scratch), "--quiet", *extra)
    assert resumed.returncode == 0, resumed.stderr
    status, runs_after, integrity = _db_facts(db)
    assert (status, runs_after, integrity) == ("done", TRIALS // 2, "ok")
    trials = [r[0] for r in sqlite3.connect(db).execute("SELECT trial FROM runs ORDER BY trial")]
    assert trials == list(range(TRIALS // 2)), "each trial exactly once"
    assert runs_before <= runs_after and leftovers(scratch) == []


def test_a_killed_childs_process_group_is_stopped_by_clean(needs_root: None, tmp_path: Path) -> None:
    # The timed child outlives a SIGKILL of layerbench and keeps the namespace's mounts and
    # loop device alive; clean must find it through the journal.
    plan = PLAN.replace('run = "sleep 0.3"', 'run = "sleep 120"').replace(
        '[workloads.write]\nkind = "stream-write"\nsize = "8M"\n', ""
    )
    scratch = TEST_ROOT / "kill-orphan"
    db = tmp_path / "r.db"
    child = start_cli(
        "run",
        str(_plan(tmp_path, plan)),
        "--db",
        str(db),
        "--scratch",
        str(scratch),
        "--quiet",
        env={"LAYERBENCH_STOP_AT": "run-started"},
    )
    wait_stopped(child)
    child.kill()
    child.communicate(timeout=60)
    done = cli("clean", "--scratch", str(scratch), "--db", str(db), check=True)
    assert "process group" in done.stdout
    assert leftovers_after(scratch, 5) == []


def test_resume_refuses_a_complete_experiment(needs_root: None, tmp_path: Path) -> None:
    scratch = TEST_ROOT / "resume-done"
    db = tmp_path / "r.db"
    cli(
        "run",
        str(_plan(tmp_path)),
        "--db",
        str(db),
        "--scratch",
        str(scratch),
        "--quiet",
        "--reps",
        "1",
        check=True,
    )
    line = one_line_error(cli("run", "--resume", "1", "--db", str(db), "--scratch", str(scratch)))
    assert "complete; nothing to resume" in line


def test_second_run_on_the_same_scratch_root_refuses_with_the_pid(needs_root: None, tmp_path: Path) -> None:
    scratch = TEST_ROOT / "locked"
    db = tmp_path / "r.db"
    first = start_cli(
        "run",
        str(_plan(tmp_path)),
        "--db",
        str(db),
        "--scratch",
        str(scratch),
        "--quiet",
        env={"LAYERBENCH_STOP_AT": "stack-built"},
    )
    try:
        wait_stopped(first)
        line = one_line_error(
            cli("run", str(_plan(tmp_path)), "--db", str(tmp_path / "other.db"), "--scratch", str(scratch))
        )
        assert f"pid {first.pid}" in line and "experiment 1" in line
    finally:
        first.send_signal(signal.SIGCONT)
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)
    assert first.returncode == 130 and leftovers(scratch) == []
    # A dead holder's lock is simply taken over.
    assert (
        cli(
            "run", str(_plan(tmp_path)), "--db", str(db), "--scratch", str(scratch), "--quiet", "--reps", "1"
        ).returncode
        == 0
    )


def test_double_ctrl_c_still_leaves_nothing(needs_root: None, tmp_path: Path) -> None:
    scratch = TEST_ROOT / "double-ctrl-c"
    child = start_cli(
        "run",
        str(_plan(tmp_path)),
        "--db",
        str(tmp_path / "r.db"),
        "--scratch",
        str(scratch),
        "--quiet",
        "--no-namespace",
        env={"LAYERBENCH_STOP_AT": "run-started"},
    )
    wait_stopped(child)
    child.send_signal(signal.SIGINT)
    child.send_signal(signal.SIGCONT)
    time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 130, stderr
    assert "Traceback" not in stderr and leftovers(scratch) == []


FAULTS = """
name = "faults"
reps = 2
rerun_disturbed = 0  # the run counts below are exact
warmup = 0
[stacks.small]
layers = [{ kind = "tmpfs", size = "16M" }]
[workloads.ok]
kind = "command"
run = "true"
[workloads.fails]
kind = "command"
run = "sh -c 'echo compiler exploded >&2; exit 3'"
[workloads.enospc]
kind = "command"
run = "dd if=/dev/zero of=big bs=1M count=64 conv=fsync status=none"
[workloads.hangs]
kind = "command"
run = "sleep 600"
timeout = 1
"""


def test_failing_full_and_hanging_workloads_are_failed_runs(needs_root: None, tmp_path: Path) -> None:
    scratch = TEST_ROOT / "faults"
    db = tmp_path / "r.db"
    started = time.monotonic()
    done = cli("run", str(_plan(tmp_path, FAULTS)), "--db", str(db), "--scratch", str(scratch))
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 120
    document = json.loads(cli("report", "--db", str(db), "--format", "json", check=True).stdout)
    assert document["experiment"]["status"] == "done"
    errors = {r["workload"]: r["error"] for r in document["runs"] if r["status"] == "failed"}
    assert set(errors) == {"fails", "enospc", "hangs"}
    assert errors["fails"] == "exit status 3: compiler exploded"
    assert "No space left on device" in errors["enospc"]
    assert "timed out after 1s" in errors["hangs"]
    assert all(r["status"] == "ok" for r in document["runs"] if r["workload"] == "ok")
    text = cli("report", "--db", str(db), check=True).stdout
    assert "Failed runs" in text and "6 run(s) failed" in text
    assert leftovers(scratch) == []


def test_real_block_devices_need_permission(needs_root: None, tmp_path: Path) -> None:
    backing = TEST_ROOT / "device-backing.img"
    backing.parent.mkdir(parents=True, exist_ok=True)
    with open(backing, "wb") as handle:
        handle.truncate(96 * 2**20)
    device = subprocess.run(
        ["losetup", "--find", "--show", str(backing)], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        plan = _plan(
            tmp_path,
            PLAN.replace('{ kind = "image", size = "64M" }', f'{{ kind = "image", device = "{device}" }}'),
        )
        scratch = TEST_ROOT / "device"
        db = str(tmp_path / "r.db")
        base = ["run", str(plan), "--db", db, "--scratch", str(scratch), "--quiet", "--reps", "1"]
        assert f"--allow-device {device}" in one_line_error(cli(*base))
        assert cli(*base, "--allow-device", device).returncode == 0
        # Now it holds ext4: formatting it again needs --force as well.
        line = one_line_error(cli(*base, "--allow-device", device))
        assert "holds a ext4 file system; add --force" in line
        assert cli(*base, "--allow-device", device, "--force").returncode == 0
        assert leftovers(scratch) == []
    finally:
        subprocess.run(["losetup", "--detach", device], check=True)
        backing.unlink()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stopping_signal_tears_down_keeps_runs_and_marks_interrupted(
    needs_root: None, tmp_path: Path, signum: signal.Signals
) -> None:
    """Ctrl-C, SIGTERM and SIGHUP (a closed ssh session) during a timed run: exit 130,
    nothing left, the experiment interrupted; resume completes it."""
    scratch = TEST_ROOT / f"signal-{signum.name}"
    db = tmp_path / "r.db"
    args = ("--db", str(db), "--scratch", str(scratch), "--quiet", "--no-namespace")
    child = start_cli("run", str(_plan(tmp_path)), *args, env={"LAYERBENCH_STOP_AT": "run-started"})
    wait_stopped(child)
    child.send_signal(signum)  # delivered once the run goes on
    child.send_signal(signal.SIGCONT)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert leftovers(scratch) == []
    status, _, integrity = _db_facts(db)
    assert (status, integrity) == ("interrupted", "ok")
    resumed = cli("run", "--resume", "1", *args)
    assert resumed.returncode == 0, resumed.stderr
    assert _db_facts(db) == ("done", TRIALS, "ok")


# Every layer kind, as the smallest stack that builds it (vm: tests/e2e/test_vm.py).
KIND_LAYERS = {
    "dir": '{ kind = "dir" }',
    "tmpfs": '{ kind = "tmpfs", size = "64M" }',
    "image": '{ kind = "image", size = "64M" }',
    "bind": '{ kind = "bind" }',
    "throttle": '{ kind = "throttle", write_bps = "500M" }',
    "overlay": '{ kind = "overlay" }',
    "fuse": '{ kind = "fuse" }',
    "fuse-daemon": '{ kind = "fuse-daemon", command = ["bindfs", "-f", "{source}", "{target}"] }',
    "fuse-overlayfs": '{ kind = "fuse-overlayfs" }',
    "squashfs": '{ kind = "squashfs", content = "builtin:small-tree" }',
    "erofs": '{ kind = "erofs", content = "builtin:small-tree" }',
    "squashfuse": '{ kind = "squashfuse", content = "builtin:small-tree" }',
    "sshfs": '{ kind = "tmpfs", size = "64M" }, { kind = "sshfs" }',
    "fscrypt": '{ kind = "fscrypt", size = "64M" }',
    "limits": '{ kind = "limits", cpus = 1, memory = "256M" }',
}
_READS_ONLY = {"squashfs", "erofs", "squashfuse"}


def test_every_layer_kind_is_in_the_recovery_tests() -> None:
    from layerbench.stacks.base import load_kinds

    kinds = load_kinds()
    # Kinds whose kernel modules this host lacks are built only in a vm layer's guest here:
    # tests/e2e/test_guest_layers.py interrupts them there.
    in_guest = {name for name, kind in kinds.items() if kind.only_in_a_guest_here()}
    assert set(kinds) - {"vm"} - in_guest == set(KIND_LAYERS)


@pytest.mark.parametrize("kind", sorted(KIND_LAYERS))
def test_every_layer_kind_leaves_nothing_after_ctrl_c_and_after_kill_9(
    needs_root: None, tmp_path: Path, kind: str
) -> None:
    workload = 'kind = "read-tree"' if kind in _READS_ONLY else 'kind = "stream-write"\nsize = "4M"'
    plan = _plan(
        tmp_path,
        f'name = "k"\nreps = 1\nwarmup = 0\nrerun_disturbed = 0\n[stacks.s]\nlayers = [{KIND_LAYERS[kind]}]\n'
        f"[workloads.w]\n{workload}\n",
    )
    scratch, db = TEST_ROOT / f"every-kind-{kind}", tmp_path / "r.db"
    common = ["run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", "--no-namespace"]
    ctrl_c_at("run-started", *common)
    assert leftovers(scratch) == [], "after Ctrl-C"
    killed = start_cli(*common, env={"LAYERBENCH_STOP_AT": "stack-built"})
    wait_stopped(killed)
    # Built and frozen: a directory holds no mount, loop device, daemon or group to leave.
    assert leftovers(scratch) or kind == "dir", "the stack is built and frozen"
    assert list(scratch.glob("trials/*"))
    killed.kill()
    killed.communicate(timeout=60)
    done = cli("clean", "--scratch", str(scratch), "--db", str(db))
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stderr
    assert leftovers_after(scratch, 10) == [], "after kill -9 and clean"


def _scheduler() -> str:
    found = other_loop_scheduler()
    if found is None:
        pytest.skip("a loop device here offers no I/O scheduler besides the one it has")
    return found


def test_a_loop_devices_scheduler_is_put_back_by_clean_after_kill_9(needs_root: None, tmp_path: Path) -> None:
    scheduler = _scheduler()
    plan = _plan(
        tmp_path,
        'name = "q"\nreps = 1\nwarmup = 0\n[stacks.s]\n'
        f'layers = [{{ kind = "image", size = "64M", scheduler = "{scheduler}", sector_size = 4096 }}]\n'
        '[workloads.w]\nkind = "stream-write"\nsize = "1M"\n',
    )
    scratch, db = TEST_ROOT / "loop-queue", tmp_path / "r.db"
    child = start_cli(
        "run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", "--no-namespace",
        env={"LAYERBENCH_STOP_AT": "stack-built"},
    )  # fmt: skip
    try:
        wait_stopped(child)
        [entry] = [json.loads(line)["add"] for line in (scratch / "journal.jsonl").read_text().splitlines()
                   if '"setting"' in line]  # fmt: skip
        queue = Path(entry["target"])
        assert f"[{scheduler}]" in queue.read_text()
        assert (queue.parent / "logical_block_size").read_text().strip() == "4096"
    finally:
        child.kill()
        child.communicate(timeout=60)
    done = cli("clean", "--scratch", str(scratch), "--db", str(db), check=True)
    assert f"restored {queue} to {entry['old']}" in done.stdout, done.stdout
    assert f"[{entry['old']}]" in queue.read_text()
    assert leftovers_after(scratch, 10) == []


def test_a_fleet_agent_killed_mid_trial_leaves_nothing_after_clean_and_the_trial_runs_again(
    needs_root: None, tmp_path: Path
) -> None:
    from layerbench.fleet.requests import PlanSource, Request
    from layerbench.plan import parse_plan
    from layerbench.plan.schedule import schedule

    plan = parse_plan(
        'name = "agent"\nreps = 1\nwarmup = 0\n[stacks.s]\n'
        f'layers = [{{ kind = "image", size = "64M", scheduler = "{_scheduler()}" }}, '
        '{ kind = "limits", memory = "256M" }]\n'
        '[workloads.w]\nkind = "stream-write"\nsize = "4M"\n',
        "agent.toml",
    )
    scratch = TEST_ROOT / "agent-killed"
    request = Request("run", "here", str(scratch), PlanSource.of(plan), schedule(plan, 1)[0], 1)
    guard = start_agent([request], scratch, {"LAYERBENCH_STOP_AT": "run-started"})
    agent = stopped_agent(guard)
    assert any(item.startswith("cgroup") for item in leftovers(scratch)), leftovers(scratch)
    os.kill(agent, signal.SIGKILL)
    guard.communicate(timeout=60)
    done = cli("clean", "--scratch", str(scratch), "--db", str(tmp_path / "none.db"), check=True)
    assert "restored /sys/block/loop" in done.stdout and "Traceback" not in done.stderr, done.stdout
    assert leftovers_after(scratch, 10) == []
    again = start_agent([request], scratch)
    output, errors = again.communicate(timeout=300)
    ready, answer = agent_answers(output)
    assert ready.ok and answer.ok and answer.value.counters.status == "ok", (answer.error, errors)
    assert leftovers(scratch) == []


def test_a_postgresql_server_stopped_mid_run_keeps_whole_runs_and_the_experiment_resumes(
    needs_root: None, tmp_path: Path
) -> None:
    """The workload stops the server in the third trial's timed run: layerbench says so in one
    line (exit 1), leaves nothing; the two runs before stay, each with all its samples; clean
    marks the experiment interrupted with a reason; resume completes it."""
    import postgres

    if reason := postgres.missing():
        pytest.skip(reason)
    TEST_ROOT.mkdir(parents=True, exist_ok=True)
    with postgres.cluster(TEST_ROOT) as server:
        url = server.create_database("results")
        started = tmp_path / "trials-started"
        stop = f"runuser -u postgres -- {postgres.BIN}/pg_ctl -D {server.data} -m immediate -w stop"
        plan = _plan(
            tmp_path,
            'name = "pg"\nreps = 4\nwarmup = 0\nrerun_disturbed = 0\n[stacks.s]\n'
            'layers = [{ kind = "image", size = "64M" }]\n[workloads.w]\nkind = "command"\n'
            f"run = \"sh -c 'echo >> {started}; [ $(wc -l < {started}) -ne 3 ] || {stop} >/dev/null'\"\n",
        )
        scratch = TEST_ROOT / "postgresql-stopped"
        done = cli("run", str(plan), "--db", url, "--scratch", str(scratch), "--quiet")
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        [line] = [line for line in done.stderr.splitlines() if line.startswith("layerbench:")]
        assert "went away" in line and "`layerbench run --resume 1`" in line, line
        assert leftovers(scratch) == []
        server.restart()
        with psycopg.connect(host=str(server.socket), user=postgres.USER, dbname="results") as db:
            stored = db.execute(
                "SELECT r.trial, r.facts_json, (SELECT count(*) FROM samples s WHERE s.run_id = r.id) "
                "FROM runs r ORDER BY r.trial"
            ).fetchall()
        assert [trial for trial, _, _ in stored] == [0, 1]
        assert all(json.loads(facts)["sampler"]["count"] == samples > 0 for _, facts, samples in stored)
        cleaned = cli("clean", "--scratch", str(scratch), "--db", url, check=True)
        assert "experiment 1 marked interrupted" in cleaned.stdout
        with psycopg.connect(host=str(server.socket), user=postgres.USER, dbname="results") as db:
            status, why = db.execute("SELECT status, status_reason FROM experiments").fetchone()
        assert status == "interrupted" and why.endswith("ended while it ran"), (status, why)
        # The resumed trials are the 4th and 5th to start: the server stays up.
        cli("run", "--resume", "1", "--db", url, "--scratch", str(scratch), "--quiet", check=True)
        with psycopg.connect(host=str(server.socket), user=postgres.USER, dbname="results") as db:
            trials = [row[0] for row in db.execute("SELECT trial FROM runs ORDER BY trial")]
            status = db.execute("SELECT status FROM experiments").fetchone()[0]
        assert (trials, status) == ([0, 1, 2, 3], "done")
        assert leftovers(scratch) == []
