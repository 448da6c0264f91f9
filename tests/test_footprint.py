"""Where a trial's data lands and whether it fits, worked out from the plan alone."""

from pathlib import Path

import pytest
from helpers import cli, one_line_error

from layerbench.core.errors import UserError
from layerbench.linux import procfs
from layerbench.plan import footprint, load_plan, parse_plan

GiB = 2**30


def _plan(stacks: str, workloads: str) -> str:
    return f'name = "fp"\n{stacks}\n{workloads}\n'


def _needs(text: str) -> dict[tuple[str, str], footprint.TrialNeed]:
    plan = parse_plan(text, "p.toml")
    return {(n.stack, n.workload): n for n in footprint.needs(plan.stacks, plan.workloads)}


WRITE = '[workloads.write]\nkind = "stream-write"\nsize = "1G"\nfill = 0.5\n'


def test_where_each_layer_puts_the_data() -> None:
    found = _needs(
        _plan(
            "[stacks.disk]\nlayers = []\n"
            '[stacks.img]\nlayers = [{ kind = "image", size = "4G" }, { kind = "bind" }]\n'
            '[stacks.ram]\nlayers = [{ kind = "tmpfs", size = "3G" }]\n'
            '[stacks.img-on-ram]\nlayers = [{ kind = "tmpfs", size = "3G" }, '
            '{ kind = "image", size = "8G", preallocate = true }]\n'
            '[stacks.ovl]\nlayers = [{ kind = "overlay", upper = "tmpfs", upper_size = "2G" }]\n',
            WRITE,
        )
    )
    disk, img, ram = found["disk", "write"], found["img", "write"], found["ram", "write"]
    # A fractional fill on the scratch root's fs writes as much as on the smallest fs (3G).
    assert (disk.placement.medium, disk.data_bytes, disk.disk_bytes, disk.memory_bytes) == (
        "disk",
        int(2.5 * GiB),
        int(2.5 * GiB),
        0,
    )
    # The sparse image takes what is written, plus the inode tables and journal mkfs.ext4 writes.
    metadata = 4 * GiB // 64 + 4 * GiB // 48
    assert (img.placement.capacity, img.data_bytes, img.disk_bytes) == (4 * GiB, 3 * GiB, 3 * GiB + metadata)
    assert (ram.placement.medium, ram.memory_bytes, ram.disk_bytes) == ("memory", int(2.5 * GiB), 0)
    on_ram = found["img-on-ram", "write"]
    # The sparse 8G image on a 3G tmpfs holds at most 3G; preallocated, it takes all 8G of memory.
    assert on_ram.placement.capacity == 3 * GiB and on_ram.memory_bytes >= 8 * GiB
    overlay = found["ovl", "write"]
    assert (overlay.placement.medium, overlay.placement.capacity) == ("memory", 2 * GiB)


def test_a_write_on_a_read_only_stack_is_refused() -> None:
    text = _plan('[stacks.ro]\nlayers = [{ kind = "bind", readonly = true }]\n', WRITE)
    with pytest.raises(UserError, match=r"stacks\.ro: is read-only, and workload write \(stream-write\)"):
        parse_plan(text, "p.toml")
    # A read-only overlay is read-only too; churn handles its own read-only mounts.
    text = _plan('[stacks.ro]\nlayers = [{ kind = "overlay", readonly = true }]\n', WRITE)
    with pytest.raises(UserError, match="is read-only"):
        parse_plan(text, "p.toml")
    churn = '[workloads.c]\nkind = "churn"\ncycles = 2\n'
    parse_plan(
        _plan('[stacks.ro]\nlayers = [{ kind = "tmpfs", size = "8M", readonly = true }]\n', churn), "p"
    )


def test_data_that_does_not_fit_on_the_top_is_refused() -> None:
    text = _plan(
        '[stacks.ram]\nlayers = [{ kind = "tmpfs", size = "100M" }]\n',
        '[workloads.w]\nkind = "stream-write"\nsize = "1G"\n',
    )
    with pytest.raises(UserError) as caught:
        parse_plan(text, "p.toml")
    assert str(caught.value) == (
        "p.toml: stacks.ram: workload w (stream-write) writes up to 1G, which does not fit in the 100M "
        "of its top (tmpfs size=100M); every run would fail"
    )
    files = '[workloads.m]\nkind = "metadata"\nfiles = 100000\nsize = "4K"\n'
    with pytest.raises(UserError, match=r"workload m \(metadata\) writes up to"):
        parse_plan(_plan('[stacks.img]\nlayers = [{ kind = "image", size = "64M" }]\n', files), "p.toml")


def test_more_memory_than_the_host_has_is_refused(tmp_path: Path) -> None:
    available = procfs.available_memory()
    assert available is not None
    size = (available // GiB + 8) * GiB
    text = _plan(
        f'[stacks.disk]\nlayers = []\n[stacks.ram]\nlayers = [{{ kind = "tmpfs", size = "{size}" }}]\n',
        f'[workloads.w]\nkind = "stream-write"\nsize = "{size - GiB}"\n',
    )
    plan = parse_plan(text, "p.toml")  # fits its own tmpfs: only this host is too small
    refusal = footprint.host_refusal(plan.stacks, plan.workloads, tmp_path)
    assert refusal is not None and refusal.startswith("stacks.ram: a trial of workload w holds up to")
    assert "available; it would run out of memory" in refusal


def test_the_built_in_plans_and_examples_fit_this_host(tmp_path: Path) -> None:
    for quick in (False, True):
        plan = load_plan(None, quick=quick)
        assert footprint.host_refusal(plan.stacks, plan.workloads, tmp_path) is None


HUGE = (
    'name = "huge"\n[stacks.disk]\nlayers = []\n[stacks.ram]\nlayers = [{ kind = "tmpfs", size = "64G" }]\n'
    '[workloads.write]\nkind = "stream-write"\nsize = "60G"\n'
)


@pytest.mark.parametrize("command", ["check", "run"])
def test_check_and_run_refuse_a_plan_this_host_cannot_hold(tmp_path: Path, command: str) -> None:
    available = procfs.available_memory()
    if available is None or available > 50 * GiB:
        pytest.skip("this host has the memory for a 60G tmpfs")
    plan = tmp_path / "huge.toml"
    plan.write_text(HUGE)
    extra = ["--db", str(tmp_path / "r.db")] if command == "run" else []
    line = one_line_error(cli(command, str(plan), "--scratch", str(tmp_path / "scratch"), *extra))
    assert "stacks.ram" in line and "60G in memory" in line and "available" in line
    assert not (tmp_path / "r.db").exists() and not (tmp_path / "scratch").exists()
