"""settle: waiting for quiet devices before a timed run, on this host's real disk (read only)
and on a loop device of the test's own, which no other program writes to: a neighbour busy on
the disk (the flake hunt's) leaves the waits on it as they are."""

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import TEST_ROOT

from layerbench.observe import settle


def _disks() -> list[str]:
    TEST_ROOT.mkdir(parents=True, exist_ok=True)
    return settle.scratch_devices(TEST_ROOT)


def test_the_scratch_roots_disk_is_found_and_read() -> None:
    disks = _disks()
    assert disks and all(Path("/sys/block", name).exists() for name in disks)
    activity = settle.read_activity(disks)
    assert activity.writes > 0 and activity.in_flight >= 0
    assert settle.read_activity(["no-such-device"]) == settle.DeviceActivity()


@pytest.fixture
def own_device(needs_root: None) -> Iterator[str]:
    """A loop device over a 64 MiB image in the test root: its queue is this test's alone."""
    TEST_ROOT.mkdir(parents=True, exist_ok=True)
    image = TEST_ROOT / f"settle-{os.getpid()}.img"
    image.write_bytes(b"")
    os.truncate(image, 64 << 20)
    done = subprocess.run(
        ["losetup", "--find", "--show", str(image)], capture_output=True, text=True, check=True
    )
    device = done.stdout.strip()
    try:
        yield device
    finally:
        subprocess.run(["losetup", "--detach", device], capture_output=True, check=False)
        image.unlink()


def test_a_quiet_wait_lasts_about_its_window(own_device: str) -> None:
    settled = settle.wait_quiet([Path(own_device).name], quiet_s=0.05, timeout_s=10)
    # Its polling: the window and a few polls (its sync, of every file system, is the host's).
    assert 0.05 <= settled.waited_s - settled.sync_s < 1 and not settled.timed_out, settled
    assert settled.busy_s <= settled.waited_s


def test_off_means_a_sync_and_no_wait() -> None:
    settled = settle.wait_quiet(_disks(), quiet_s=0, timeout_s=10)
    assert settled.waited_s == settled.sync_s and settled.busy_s == 0 and not settled.timed_out


def test_a_writer_keeps_the_wait_going_and_is_counted(own_device: str) -> None:
    """While a thread writes and fsyncs for ~0.6 s, the device is not quiet: the wait lasts
    past the writer and counts what it wrote."""
    stop = time.monotonic() + 0.6

    def write() -> None:
        with open(own_device, "wb") as handle:
            while time.monotonic() < stop:
                handle.seek(0)  # the same 1 MiB again: the device holds 64
                handle.write(b"\x01" * (1 << 20))
                handle.flush()
                os.fsync(handle.fileno())

    writer = threading.Thread(target=write)
    writer.start()
    try:
        settled = settle.wait_quiet([Path(own_device).name], quiet_s=0.2, timeout_s=10)
    finally:
        writer.join()
    # busy: from the wait's start (its sync included) to the writer's last write
    assert settled.busy_s >= 0.4 and settled.waited_s >= settled.busy_s + 0.2, settled
    assert settled.written_bytes >= 1 << 20 and not settled.timed_out
    facts = settled.facts()
    assert set(facts) == {f"settle_{k}" for k in settled.__dataclass_fields__}


def test_the_kernel_threads_work_on_what_was_left_dirty_is_read_over_the_wait() -> None:
    """256 MiB left dirty in the page cache: the wait's sync has the kernel's flusher threads
    write it back, and their CPU is the wait's (a pre-run covariate of the next run)."""
    TEST_ROOT.mkdir(parents=True, exist_ok=True)
    target = TEST_ROOT / f"settle-dirty-{os.getpid()}"
    try:
        with open(target, "wb") as handle:
            for _ in range(256):
                handle.write(b"\x01" * (1 << 20))
        settled = settle.wait_quiet(_disks(), quiet_s=0.05, timeout_s=30)
    finally:
        target.unlink()
    assert settled.kthread_cpu_s is not None and settled.kthread_cpu_s > 0, settled
    assert settled.facts()["settle_kthread_cpu_s"] == settled.kthread_cpu_s
    assert settle.wait_quiet(_disks(), quiet_s=0, timeout_s=10).kthread_cpu_s is None  # off: not read


def test_a_wait_that_cannot_find_quiet_says_it_timed_out() -> None:
    settled = settle.wait_quiet(_disks(), quiet_s=5, timeout_s=0.1)
    assert settled.timed_out and settled.waited_s < 1


def test_waits_are_cut_short_after_one_that_found_the_devices_busy_throughout(
    scratch_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program writing all the time keeps every wait busy until its timeout: after
    one such wait the next last at most 1 s, until one finds the devices quiet; the wait after
    that has its full timeout again."""
    from layerbench.executors.base import Setting
    from layerbench.executors.local import LocalExecutor
    from layerbench.plan import parse_plan
    from layerbench.scratch import Scratch

    asked: list[float] = []
    outcomes = iter([False, True, True, True, False, True, False])  # timed out?

    def scripted(devices: list[str], *, quiet_s: float, timeout_s: float) -> settle.Settled:
        asked.append(timeout_s)
        return settle.Settled(timeout_s, timeout_s, 0, 0, 0, next(outcomes))

    monkeypatch.setattr(settle, "wait_quiet", scripted)
    plan = parse_plan(
        'name = "p"\nbaseline = "a"\nsettle_timeout = 10\n[stacks.a]\nlayers = []\n'
        '[workloads.w]\nkind = "command"\nrun = "true"\n',
        "p.toml",
    )
    executor = LocalExecutor(Scratch(scratch_root))
    cut = [executor._settle(Setting(plan, {}, 1), []).cut_short for _ in range(7)]
    assert asked == [10, 10, 1.0, 1.0, 1.0, 10, 1.0]
    assert cut == [False, False, True, True, True, False, True]
