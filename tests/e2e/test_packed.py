"""squashfs and erofs layers and the read-tree workload for real: one tree packed, mounted
and read on each, nothing left after a run or after kill -9 and clean."""

import signal
from pathlib import Path

import pytest
from helpers import (
    TEST_ROOT,
    cli,
    leftovers,
    leftovers_after,
    one_line_error,
    run_plan,
    start_cli,
    wait_stopped,
)

pytestmark = pytest.mark.e2e

PLAN = """
name = "packed"
reps = 1
warmup = 0
rerun_disturbed = 0
baseline = "dir"
[stacks.dir]
layers = []
[stacks.squashfs]
layers = [{ kind = "squashfs", content = "builtin:small-tree", compressor = "gzip", level = 6 }]
[stacks.erofs]
layers = [{ kind = "erofs", content = "builtin:small-tree" }]
[stacks.squashfuse]
layers = [{ kind = "squashfuse", content = "builtin:small-tree", multithreaded = false }]
[stacks.erofs-overlay]
layers = [{ kind = "erofs", content = "builtin:small-tree" }, { kind = "overlay" }]
[workloads.stat]
kind = "read-tree"
tree = "builtin:small-tree"
[workloads.read]
kind = "read-tree"
tree = "builtin:small-tree"
mode = "read"
readers = 2
[workloads.warm]
kind = "read-tree"
tree = "builtin:small-tree"
warm = true
"""


def test_one_tree_is_read_on_every_packed_layer(needs_root: None, tmp_path: Path) -> None:
    scratch = TEST_ROOT / "packed"
    document = run_plan(tmp_path, PLAN, scratch)
    runs = document["runs"]
    assert len(runs) == 15 and all(r["status"] == "ok" for r in runs), [r["error"] for r in runs]
    entries = {(r["stack"], r["workload"]): r["facts"]["entries"] for r in runs}
    assert len(set(entries.values())) == 1 and min(entries.values()) > 300, entries  # one tree
    read = {r["stack"]: r["facts"]["read_bytes_total"] for r in runs if r["workload"] == "read"}
    assert len(set(read.values())) == 1 and min(read.values()) > 1_000_000, read
    assert all(r["facts"]["read_errors"] == 0 for r in runs)
    mounts = {name: " ".join(info["mount_lines"]) for name, info in document["stacks"].items()}
    assert " squashfs " in mounts["squashfs"] and "/dev/loop" in mounts["squashfs"]
    assert " erofs " in mounts["erofs"] and " overlay " in mounts["erofs-overlay"]
    served = mounts["squashfuse"]
    assert " fuse.squashfuse_ll " in served and "squashfuse_ll -f -s -o ro " in served
    helper = [r["helper_cpu_s"] for r in runs if r["stack"] == "squashfuse" and r["workload"] == "read"]
    assert helper[0] > 0, "the daemon's CPU is the read's cost in userspace"
    assert leftovers(scratch) == []


def test_a_write_onto_a_packed_stack_is_refused_up_front(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'name = "x"\n[stacks.s]\nlayers = [{ kind = "squashfs", content = "builtin:small-tree" }]\n'
        '[workloads.w]\nkind = "stream-write"\nsize = "1M"\n'
    )
    line = one_line_error(cli("check", str(plan)))
    assert "stacks.s: is read-only, and workload w (stream-write) writes onto it" in line


@pytest.mark.parametrize("kind", ["squashfs", "erofs", "squashfuse"])
def test_kill_9_with_a_packed_layer_mounted_then_clean_leaves_nothing(
    needs_root: None, tmp_path: Path, kind: str
) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'name = "x"\nreps = 1\nwarmup = 0\n[stacks.s]\n'
        f'layers = [{{ kind = "{kind}", content = "builtin:small-tree" }}]\n'
        '[workloads.w]\nkind = "read-tree"\n'
    )
    db, scratch = tmp_path / "r.db", TEST_ROOT / f"packed-kill-{kind}"
    child = start_cli(
        "run",
        str(plan),
        "--db",
        str(db),
        "--scratch",
        str(scratch),
        "--quiet",
        "--no-namespace",
        env={"LAYERBENCH_STOP_AT": "stack-built"},
    )
    wait_stopped(child)
    mounted = "L1-fuse" if kind == "squashfuse" else f"L1-{kind}"  # a FUSE layer's mount point
    assert any(mounted in item for item in leftovers(scratch))  # mounted, frozen
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    done = cli("clean", "--scratch", str(scratch), "--db", str(db))
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stderr
    assert leftovers_after(scratch, 10) == []
