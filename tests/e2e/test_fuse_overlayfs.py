"""fuse-overlayfs for real: writes land in its upper (disk or tmpfs), a tree reads the same
through it over a directory and over an erofs image, its daemon's CPU is counted, and
nothing is left after a run or after kill -9 and clean."""

import signal
from pathlib import Path

import pytest
from helpers import TEST_ROOT, cli, leftovers, leftovers_after, run_plan, start_cli, wait_stopped

pytestmark = pytest.mark.e2e

PLAN = """
name = "fuse-overlayfs"
reps = 1
warmup = 0
rerun_disturbed = 0
baseline = "overlay"
[stacks.overlay]
layers = [{ kind = "overlay" }]
[stacks.fo]
layers = [{ kind = "fuse-overlayfs" }]
[stacks.fo-tmpfs]
layers = [{ kind = "fuse-overlayfs", upper = "tmpfs", upper_size = "128M" }]
[stacks.fo-erofs]
layers = [{ kind = "erofs", content = "builtin:small-tree" }, { kind = "fuse-overlayfs" }]
[workloads.write]
kind = "stream-write"
size = "16M"
[workloads.stat]
kind = "read-tree"
tree = "builtin:small-tree"
"""


def test_fuse_overlayfs_serves_writes_and_reads(needs_root: None, tmp_path: Path) -> None:
    scratch = TEST_ROOT / "fuse-overlayfs"
    document = run_plan(tmp_path, PLAN, scratch)
    runs = document["runs"]
    assert len(runs) == 8 and all(r["status"] == "ok" for r in runs), [r["error"] for r in runs]
    entries = {r["stack"]: r["facts"]["entries"] for r in runs if r["workload"] == "stat"}
    assert len(set(entries.values())) == 1, entries
    for name in ("fo", "fo-tmpfs", "fo-erofs"):
        lines = " ".join(document["stacks"][name]["mount_lines"])
        assert "fuse.fuse-overlayfs" in lines and "fuse-overlayfs pid" in lines, lines
    assert " tmpfs " in " ".join(document["stacks"]["fo-tmpfs"]["mount_lines"])
    assert all(r["helper_cpu_s"] is not None for r in runs if r["stack"].startswith("fo"))
    assert leftovers(scratch) == []


def test_kill_9_with_fuse_overlayfs_mounted_then_clean_leaves_nothing(
    needs_root: None, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'name = "x"\nreps = 1\nwarmup = 0\n[stacks.s]\nlayers = [{ kind = "fuse-overlayfs" }]\n'
        '[workloads.w]\nkind = "stream-write"\nsize = "1M"\n'
    )
    db, scratch = tmp_path / "r.db", TEST_ROOT / "fuse-overlayfs-kill"
    child = start_cli(
        "run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", "--no-namespace",
        env={"LAYERBENCH_STOP_AT": "stack-built"},
    )  # fmt: skip
    wait_stopped(child)
    assert any("fuse-overlayfs" in item for item in leftovers(scratch))  # its daemon and mount
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    done = cli("clean", "--scratch", str(scratch), "--db", str(db))
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stderr
    assert leftovers_after(scratch, 10) == []
