"""churn for real on every layer kind this host has: cycles through the layer's own
expose(), latencies, no failures, no leaked mounts or loop devices, the kernel log read."""

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import TEST_ROOT, cli, leftovers, leftovers_after, skip_unless_root, start_cli

from layerbench.linux import procfs
from layerbench.stacks.base import load_kinds

pytestmark = pytest.mark.e2e

# A vm top layer runs the workload inside its guest, where nothing is left to churn;
# tests/e2e/test_vm.py covers the guest.
# vm, and the kinds this host's kernel lacks modules for, are built in a guest (test_vm.py,
# test_guest_layers.py).
KINDS = sorted(
    name for name, kind in load_kinds().items() if name != "vm" and not kind.only_in_a_guest_here()
)
_OPTIONS = {
    "tmpfs": ', size = "32M"',
    "image": ', size = "32M"',
    "fscrypt": ', size = "32M"',
    "throttle": ', write_bps = "100M"',
    "limits": ", cpus = 1",
    "fuse-daemon": ', command = ["bindfs", "-f", "{source}", "{target}"]',
}


def _plan(cycles: int, files: int, extra: str = "") -> str:
    stacks = "".join(
        f'[stacks.{kind}]\nlayers = [{{ kind = "{kind}"{_OPTIONS.get(kind, "")} }}]\n' for kind in KINDS
    )
    return (
        f'name = "churn-e2e"\nreps = 1\nwarmup = 0\nbaseline = "{KINDS[0]}"\n{stacks}'
        f'[workloads.churn]\nkind = "churn"\ncycles = {cycles}\nfiles = {files}\n{extra}'
    )


@pytest.fixture(scope="module")
def churned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    skip_unless_root("mounts, loop devices and /dev/kmsg")
    base = tmp_path_factory.mktemp("churn")
    plan = base / "plan.toml"
    plan.write_text(_plan(cycles=10, files=2))
    db = base / "r.db"
    scratch = TEST_ROOT / "churn-run"
    done = cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet")
    assert done.returncode == 0, done.stderr
    return {
        "json": json.loads(cli("report", "--db", str(db), "--format", "json", check=True).stdout),
        "text": cli("report", "--db", str(db), check=True).stdout,
        "markdown": cli("report", "--db", str(db), "--format", "markdown", check=True).stdout,
        "mail": cli("report", "--db", str(db), "--format", "mail", check=True).stdout,
        "leftovers": leftovers(scratch),
    }


@pytest.mark.parametrize("kind", KINDS)
def test_churn_on_every_layer_kind(churned: dict[str, object], kind: str) -> None:
    document = churned["json"]
    assert isinstance(document, dict)
    run = next(r for r in document["runs"] if r["stack"] == kind)
    churn = run["facts"]["churn"]
    assert run["status"] == "ok", (run["error"], churn["errors"])
    assert churn["cycles"] == 10 and run["units"] == 10 and run["unit"] == "cycles"
    assert churn["failures"] == 0 and churn["errors"] == []
    assert churn["leaked_mounts"] == 0 and churn["leaked_loops"] == 0
    assert churn["kernel_log"]["checked"] and churn["kernel_log"]["alarms"] == 0
    for key in ("mount_s", "unmount_s"):
        values = churn[key]
        assert 0 < values["p50"] <= values["p90"] <= values["p99"] <= values["max"]
    assert churn["cycles_per_s"] > 0


def test_churn_is_in_every_human_report(churned: dict[str, object]) -> None:
    for name in ("text", "markdown", "mail"):
        report = churned[name]
        assert isinstance(report, str)
        assert "mount p50/p90/p99" in report and "leaked mounts+loops" in report, name
        assert "oops/BUG/WARNING/hung" in report
    assert churned["leftovers"] == []


def test_a_churn_killed_mid_cycle_leaves_nothing(needs_root: None, tmp_path: Path) -> None:
    """A churn child killed by its timeout leaves mounts its parent removes."""
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'name = "churn-kill"\nreps = 1\nwarmup = 0\n[stacks.image]\n'
        'layers = [{ kind = "image", size = "32M" }]\n'
        '[workloads.churn]\nkind = "churn"\nduration = 60\ntimeout = 2\n'
    )
    scratch = TEST_ROOT / f"churn-kill-{tmp_path.name}"
    done = cli("run", str(plan), "--db", str(tmp_path / "r.db"), "--scratch", str(scratch), "--quiet")
    assert done.returncode == 0, done.stderr
    document = json.loads(
        cli("report", "--db", str(tmp_path / "r.db"), "--format", "json", check=True).stdout
    )
    assert document["runs"][0]["status"] == "failed" and "timed out" in document["runs"][0]["error"]
    assert leftovers(scratch) == []


def _start_churn(
    tmp_path: Path, *extra: str, stop_at: str | None = None
) -> tuple[subprocess.Popen[str], Path, Path]:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'name = "churn-long"\nreps = 2\nwarmup = 0\n[stacks.image]\n'
        'layers = [{ kind = "image", size = "32M" }]\n'
        '[workloads.churn]\nkind = "churn"\nduration = 120\nfiles = 2\n'
    )
    scratch = TEST_ROOT / f"churn-stop-{tmp_path.name}"
    db = tmp_path / "r.db"
    env = {"LAYERBENCH_STOP_AT": stop_at} if stop_at else None
    child = start_cli(
        "run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", *extra, env=env
    )
    if stop_at:
        _wait_churn_child_stopped(child, scratch)
        return child, scratch, db
    # Wait until the churn itself mounts (the stack's own image plus a churned one).
    deadline = time.monotonic() + 120
    while sum("mount" in item for item in leftovers(scratch)) < 2 or not list(
        scratch.glob("trials/*/churn/L*")
    ):
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the churn never started"
        time.sleep(0.01)
    time.sleep(1)
    return child, scratch, db


def _wait_churn_child_stopped(run: subprocess.Popen[str], scratch: Path) -> None:
    """Wait until the churn child of this run froze itself with a cycle's mount up."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for pid in procfs.pids():
            argv = procfs.cmdline(pid)
            stat = procfs.pid_stat(pid)
            if (
                stat
                and stat.state == "T"
                and any(b"_churn_child" in a for a in argv)
                and any(str(scratch).encode() in a for a in argv)
            ):
                return
        assert run.poll() is None, run.communicate()
        time.sleep(0.02)
    raise AssertionError("the churn child never reached its failpoint")


def test_ctrl_c_during_churn_leaves_nothing(needs_root: None, tmp_path: Path) -> None:
    child, scratch, _ = _start_churn(tmp_path, "--no-namespace")
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert leftovers(scratch) == []


@pytest.mark.parametrize("where", ["host", "namespace"])
def test_kill_9_during_churn_then_clean_leaves_nothing(needs_root: None, tmp_path: Path, where: str) -> None:
    """Killed while a churned mount is up (the churn child frozen at its failpoint; the
    kernel ends it with SIGHUP once its group is orphaned, its mounts left up): clean
    unmounts and detaches, exits 0, prints no traceback."""
    extra = ("--no-namespace",) if where == "host" else ()
    child, scratch, db = _start_churn(tmp_path, *extra, stop_at="churn-mounted")
    child.kill()
    child.communicate(timeout=60)
    if where == "host":
        assert any("churn/L" in item for item in leftovers(scratch)), "the churned mount should be up"
    done = cli("clean", "--scratch", str(scratch), "--db", str(db))
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, (done.stdout, done.stderr)
    if where == "host":
        assert "unmounted" in done.stdout
    assert leftovers_after(scratch, 10) == []


def test_kill_9_at_a_random_moment_of_churn_then_clean(needs_root: None, tmp_path: Path) -> None:
    """The race of the field: a kill while the child's mount(8) may be in flight."""
    child, scratch, db = _start_churn(tmp_path, "--no-namespace")
    child.kill()
    child.communicate(timeout=60)
    done = cli("clean", "--scratch", str(scratch), "--db", str(db))
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, (done.stdout, done.stderr)
    assert leftovers_after(scratch, 10) == []
