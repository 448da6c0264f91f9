"""The kernel's counters of a run (kernelstats.py, measure.py): real /proc reads and a real
cgroup v2 group for the run's own pressure, plus the thread bookkeeping on made-up snapshots."""

import contextlib
from pathlib import Path

import pytest

from layerbench.linux import cgroups
from layerbench.observe import kernelstats, measure, settle
from layerbench.scratch import Scratch

HAS_PSI = Path("/proc/pressure/io").exists()


@pytest.mark.skipif(not HAS_PSI, reason="this kernel has no pressure stall information (/proc/pressure)")
def test_psi_totals_are_read_in_seconds() -> None:
    found = kernelstats.read_psi()
    assert {"io_some", "io_full", "cpu_some", "memory_some", "memory_full"} <= set(found)
    assert all(value >= 0 for value in found.values())


def test_a_kernel_thread_seen_only_after_is_counted_whole_and_a_renamed_kworker_by_its_pid() -> None:
    split = kernelstats.CpuSplit(busy=0, iowait=0, steal=0, total=100)
    before = kernelstats.Snapshot(
        {}, {}, {}, split, {"10": ("kworker/u8:1-events", 1.0), "11": ("loop0", 5.0)}
    )
    later = kernelstats.CpuSplit(busy=50, iowait=10, steal=0, total=200)
    after = kernelstats.Snapshot(
        {},
        {},
        {},
        later,
        {
            "10": ("kworker/u8:1-flush-7:0", 1.25),  # the same thread, now doing writeback
            "11": ("loop0", 5.5),
            "12": ("jbd2/loop0-8", 0.125),  # started during the run
        },
    )
    found = kernelstats.delta(before, after)
    assert found.kthread_cpu_s == pytest.approx(0.875)
    assert found.threads == {"loop0": 0.5, "kworker (flush-7:0)": 0.25, "jbd2/loop0-8": 0.125}
    assert found.host_busy_pct == pytest.approx(50.0) and found.host_iowait_pct == pytest.approx(10.0)
    assert found.psi_scope is None and found.psi_io_some_s is None


def test_a_run_gets_the_kernel_counters_and_the_bottom_disk(needs_root: None, tmp_path: Path) -> None:
    disks = settle.scratch_devices(tmp_path)
    if not disks:
        pytest.skip(f"no block device under {tmp_path}")
    counters = measure.run_timed(
        ["dd", "if=/dev/zero", "of=f", "bs=1M", "count=32", "conv=fsync", "status=none"],
        cwd=tmp_path,
        devices=disks,
    )
    assert counters.status == "ok", counters.error
    assert counters.disk_write_bytes is not None and counters.disk_write_bytes >= 32 * 2**20
    assert counters.disk_busy_pct is not None and 0 < counters.disk_busy_pct <= 100
    assert counters.disk_wait_ms is not None and counters.disk_wait_ms > 0
    assert counters.kthread_cpu_s is not None and counters.kthread_cpu_s >= 0
    assert counters.vm_written_bytes is not None
    kernel = counters.facts["kernel"]
    assert kernel["devices_top_first"] == disks  # type: ignore[index]
    assert kernel["psi_scope"] == ("system" if HAS_PSI else None)  # type: ignore[index]


@pytest.mark.skipif(
    not HAS_PSI or cgroups.pressure_hierarchy() is None, reason="no cgroup v2 tree with pressure files here"
)
def test_a_run_in_its_own_group_gets_its_own_pressure(needs_root: None, scratch_root: Path) -> None:
    tree = cgroups.pressure_hierarchy()
    assert tree is not None
    scratch = Scratch(scratch_root)
    with contextlib.ExitStack() as stack:
        group = stack.enter_context(scratch.cgroup(tree, "pressure-test"))
        # A cold read of a file written and dropped from the cache waits for the disk.
        work = stack.enter_context(scratch.directory("work", trial=False))
        (work / "f").write_bytes(b"\0" * (16 * 2**20))
        measure.drop_caches()
        counters = measure.run_timed(
            ["sh", "-c", "cat f > /dev/null"],
            cwd=work,
            cgroups=[group / "cgroup.procs"],
            pressure_group=group,
        )
        assert counters.status == "ok", counters.error
        assert counters.facts["kernel"]["psi_scope"] == "run"  # type: ignore[index]
        assert counters.psi_io_some_s is not None and counters.psi_io_some_s > 0
        # The run's own stall can never exceed its elapsed time.
        assert counters.psi_io_some_s <= counters.wall_s + 0.01
    assert not group.exists()


def test_free_page_reporting_is_read_around_each_run_and_since_the_last() -> None:
    observer = kernelstats.FreePageReporting()
    with observer.around() as first:
        pass
    with observer.around() as second:
        pass
    counted = kernelstats.read_reported_kib() is not None
    assert first.facts()["mem_free_kib_before_run"] > 0
    # Since the last run: only from the second run on, and only where the kernel counts it.
    assert "memory_reported_kib_before_run" not in first.facts()
    assert ("memory_reported_kib_before_run" in second.facts()) == counted
    assert ("memory_reported_kib_during_run" in second.facts()) == counted
    assert all(value >= 0 for key, value in second.facts().items() if key.startswith("memory_reported"))
