"""Settling: before a timed run starts, the devices under the scratch root are quiet.

A trial's teardown deletes its tree or image; the file system turns that into journal
commits and, with online `discard`, into discard requests that the device works through
later. Left alone, that work lands in the next trial's timed run. `wait_quiet` writes back
what is dirty, then polls /proc/diskstats until no request is in flight and no write,
discard or flush completed for `quiet_s`, or `timeout_s` passed; the run records how long it
waited and what was still in flight, so a report can show it. It also records the kernel
threads' CPU over the wait (writeback, discards, the file systems' own workers): work the
trials before left, read before the timed run starts, so a pre-run covariate."""

import os
import time
from dataclasses import asdict, dataclass
from typing import Any

from layerbench.core.facts import Fact, declare
from layerbench.linux import mounts
from layerbench.observe import kernelstats

WAITED_S = Fact(
    "settle_waited_s",
    "before",
    "seconds from the sync to the end of the quiet window (0 when settling is off)",
    float,
)
BUSY_S = Fact("settle_busy_s", "before", "of the wait, the seconds the devices were still working", float)
SYNC_S = Fact(
    "settle_sync_s", "before", "of the wait, the seconds its sync (writing back what was dirty) took", float
)
IN_FLIGHT = Fact(
    "settle_in_flight", "before", "requests in flight on the devices when the wait began, after the sync", int
)
WRITTEN_BYTES = Fact("settle_written_bytes", "before", "bytes written to the devices while waiting", int)
DISCARDED_BYTES = Fact(
    "settle_discarded_bytes", "before", "bytes discarded on the devices while waiting", int
)
TIMED_OUT = Fact("settle_timed_out", "before", "the devices never went quiet within the settle timeout", bool)
CUT_SHORT = Fact(
    "settle_cut_short",
    "before",
    "the wait was cut short: the devices stayed busy through the last trials' waits",
    bool,
)
KTHREAD_CPU_S = Fact(
    "settle_kthread_cpu_s",
    "before",
    "kernel threads' CPU seconds from the sync to the end of the wait",
    float,
)
declare(
    WAITED_S, BUSY_S, SYNC_S, IN_FLIGHT, WRITTEN_BYTES, DISCARDED_BYTES, TIMED_OUT, CUT_SHORT, KTHREAD_CPU_S
)

_SECTOR = 512
POLL_S = 0.02
# After this many waits in a row that timed out, the next waits last at most CUT_TIMEOUT_S
# (executors/local.py): the devices are busy with someone else's work. One is enough: the wait
# begins with a sync, so devices still busy a whole timeout later are working for another
# program. Beside the flake hunt's disk-writing neighbour, in each of the 20 processes of the
# recovery tests that waited three times, the second and third full waits timed out as well:
# 20 s of each process that bought nothing.
GIVE_UP_AFTER = 1
CUT_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class DeviceActivity:
    """The diskstats fields that say work is still going on (summed over devices)."""

    in_flight: int = 0
    writes: int = 0
    written_bytes: int = 0
    discards: int = 0
    discarded_bytes: int = 0
    flushes: int = 0

    def moved_since(self, other: "DeviceActivity") -> bool:
        return (self.writes, self.discards, self.flushes) != (other.writes, other.discards, other.flushes)


def read_activity(names: list[str]) -> DeviceActivity:
    wanted = set(names)
    totals = [0] * 6
    with open("/proc/diskstats") as handle:
        for line in handle:
            fields = line.split()
            if fields[2] not in wanted:
                continue
            # Fields after the name: 4-11 reads/writes, 12 in flight, 15-18 discards (4.18+),
            # 19-20 flushes (5.5+); older kernels end earlier and count 0 there.
            values = [int(v) for v in fields[3:]] + [0] * 17
            totals = [
                totals[0] + values[8],
                totals[1] + values[4],
                totals[2] + values[6] * _SECTOR,
                totals[3] + values[11],
                totals[4] + values[13] * _SECTOR,
                totals[5] + values[15],
            ]
    return DeviceActivity(*totals)


@dataclass(frozen=True)
class Settled:
    """What one wait found: stored with the run as its settle_* facts."""

    waited_s: float  # from the sync to the end of the quiet window (0 when disabled)
    busy_s: float  # of which the devices were still working
    in_flight: int  # requests in flight when the wait began, after the sync
    written_bytes: int  # written while waiting
    discarded_bytes: int  # discarded while waiting
    timed_out: bool
    cut_short: bool = False  # the timeout was cut: the devices stayed busy through the last waits
    kthread_cpu_s: float | None = None  # kernel threads' CPU from the sync to the end of the wait
    # The sync's own share of waited_s: the timeout bounds the polling, which starts with the
    # sync, and a sync cannot be cut short (beside a busy writer it took seconds).
    sync_s: float = 0.0

    def facts(self) -> dict[str, Any]:
        return {f"settle_{key}": value for key, value in asdict(self).items()}


def scratch_devices(root: str | os.PathLike[str]) -> list[str]:
    """The whole disks under the scratch root's file system (vda, not vda1): a partition's
    neighbours share its queue."""
    return sorted({mounts.whole_disk(name) for name in mounts.devices_under(root)})


def _threads_cpu_s(before: dict[str, tuple[str, float]]) -> float:
    """Kernel threads' CPU since `before` (threads started since count from 0)."""
    spent = 0.0
    for pid, (_, cpu) in kernelstats.kernel_threads().items():
        earlier = before.get(pid)
        spent += max(0.0, cpu - earlier[1]) if earlier is not None else cpu
    return round(spent, 4)


def wait_quiet(devices: list[str], *, quiet_s: float, timeout_s: float) -> Settled:
    began = time.monotonic()
    if quiet_s <= 0 or not devices:
        os.sync()
        took = round(time.monotonic() - began, 4)
        return Settled(took, 0.0, 0, 0, 0, False, sync_s=took)
    threads = kernelstats.kernel_threads()
    os.sync()
    synced = time.monotonic()
    first = previous = read_activity(devices)
    last_busy = time.monotonic()
    while True:
        current = read_activity(devices)
        moment = time.monotonic()
        if current.in_flight or current.moved_since(previous):
            last_busy = moment
        previous = current
        if moment - last_busy >= quiet_s or moment - began >= timeout_s:
            break
        time.sleep(POLL_S)
    return Settled(
        waited_s=round(moment - began, 4),
        busy_s=round(max(0.0, last_busy - began), 4),
        in_flight=first.in_flight,
        written_bytes=current.written_bytes - first.written_bytes,
        discarded_bytes=current.discarded_bytes - first.discarded_bytes,
        timed_out=moment - last_busy < quiet_s,
        kthread_cpu_s=_threads_cpu_s(threads),
        sync_s=round(synced - began, 4),
    )
