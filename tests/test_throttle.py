"""The throttle layer: a real control group, joined by the timed run, journaled and removed."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import leftovers

from layerbench.core.errors import SetupError, UserError
from layerbench.linux import cgroups
from layerbench.observe import measure
from layerbench.plan import parse_plan
from layerbench.scratch import Scratch
from layerbench.stacks.base import BuildContext, build_stack, make_layers

IMAGE_ON_TMPFS = '{ kind = "tmpfs", size = "256M" }, { kind = "image", size = "160M" }'


def _layers(body: str) -> list:
    text = f'name = "t"\n[stacks.s]\nlayers = [{body}]\n[workloads.w]\nkind = "churn"\ncycles = 1\n'
    return make_layers(parse_plan(text, "test").stacks["s"])


@pytest.fixture
def needs_io_cgroups(needs_root: None) -> cgroups.Hierarchy:
    hierarchy = cgroups.io_hierarchy()
    if hierarchy is None:
        pytest.skip("no cgroup v1 blkio or v2 io controller on this host")
    return hierarchy


@pytest.mark.parametrize(
    ("layer", "expected"),
    [
        ('{ kind = "throttle" }', "give at least one of write_bps"),
        ('{ kind = "throttle", write_bps = "fast" }', "is not a size"),
        ('{ kind = "throttle", read_iops = 0 }', "IOPS must be a positive number"),
        ('{ kind = "throttle", write_bps = 1000, devices = "some" }', "devices"),
    ],
)
def test_bad_throttle_options_name_the_key(layer: str, expected: str) -> None:
    with pytest.raises(UserError, match=expected):
        _layers(layer)


def test_limits_are_bytes_or_sizes() -> None:
    (layer,) = _layers('{ kind = "throttle", write_bps = "10M", read_bps = 5000, write_iops = 100 }')
    assert layer.options.limits() == {"read_bps": 5000, "write_bps": 10 * 2**20, "write_iops": 100}


def test_throttled_writes_take_the_time_the_limit_allows(
    needs_io_cgroups: cgroups.Hierarchy, scratch_root: Path
) -> None:
    rate = 20 * 2**20  # 32 MiB at 20 MiB/s: 1.6 s
    scratch = Scratch(scratch_root)
    with scratch.directory("trials", "t") as workdir:
        ctx = BuildContext(scratch=scratch, workdir=workdir)
        layers = _layers(f'{IMAGE_ON_TMPFS}, {{ kind = "throttle", write_bps = {rate} }}')
        with build_stack(ctx, layers) as built:
            (procs,) = built.cgroup_procs
            group = procs.parent
            assert any(item.startswith("cgroup ") for item in leftovers(scratch_root))
            loop = built.devices()[0]
            assert loop.startswith("loop") and any(loop in line for line in built.mount_lines)
            argv = [
                "dd",
                "if=/dev/zero",
                f"of={built.top}/f",
                "bs=1M",
                "count=32",
                "oflag=direct",
                "conv=fsync",
            ]
            throttled = measure.run_timed(argv, cwd=built.top, cgroups=built.cgroup_procs)
            free = measure.run_timed(argv, cwd=built.top)
            assert throttled.status == "ok" and free.status == "ok"
            assert 1.45 < throttled.wall_s < 3.0, throttled.wall_s
            assert free.wall_s < throttled.wall_s / 2
            # The harness stepped back out of the group after the spawn.
            assert str(os.getpid()) not in procs.read_text().split()
        assert not group.exists()
    assert scratch.journal.pending() == []
    assert leftovers(scratch_root) == []


def test_a_throttle_needs_a_block_device_below(
    needs_io_cgroups: cgroups.Hierarchy, scratch_root: Path
) -> None:
    scratch = Scratch(scratch_root)
    with scratch.directory("trials", "t") as workdir:
        ctx = BuildContext(scratch=scratch, workdir=workdir)
        layers = _layers('{ kind = "tmpfs", size = "16M" }, { kind = "throttle", write_bps = 1000000 }')
        with pytest.raises(SetupError, match="no block device"), build_stack(ctx, layers):
            pass
    assert leftovers(scratch_root) == []


def test_clean_removes_a_killed_runs_cgroup_and_what_is_inside(
    needs_io_cgroups: cgroups.Hierarchy, scratch_root: Path
) -> None:
    scratch = Scratch(scratch_root)
    # What a run killed with SIGKILL leaves: a journaled group with its workload still in it.
    path = needs_io_cgroups.parent / cgroups.group_name(scratch.root, "e1-t0-L1")
    scratch.journal.add("cgroup", path)
    group = cgroups.create(needs_io_cgroups, path.name)
    orphan = subprocess.Popen(["sleep", "60"])
    (group / "cgroup.procs").write_text(f"{orphan.pid}\n")
    assert f"cgroup {group}" in leftovers(scratch_root)
    removed = Scratch(scratch_root).clean().removed
    assert f"removed control group {group}" in removed
    assert not group.exists()
    deadline = time.monotonic() + 5
    while orphan.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert orphan.returncode == -signal.SIGKILL
    assert leftovers(scratch_root) == []


def test_remove_refuses_a_group_that_is_not_ours(needs_io_cgroups: cgroups.Hierarchy) -> None:
    with pytest.raises(SetupError, match="not a layerbench control group"):
        cgroups.remove(needs_io_cgroups.mount_point)
