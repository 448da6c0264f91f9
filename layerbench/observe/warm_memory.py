"""Memory held warm for a timed run, where the kernel hands free memory back to its
hypervisor (free page reporting, e.g. a virtio-balloon that reports free pages).

Memory that stays free for a few seconds is reported and unmapped in the host; the next
page allocation that lands on it pays a host fault per page, inside whatever run makes it.
Measured on this project's VM after 10 s of idle: 1 GiB written into a tmpfs took 2.8-3.2 s,
and 0.31-0.33 s when as much memory had been held since the trial began and was let go just
before the run; 1 GiB written into the page cache of the disk's ext4 took 2.2-3.0 s, and
0.22-0.24 s after a hold in huge pages (a hold in 4 KiB pages did not help it: the page cache
takes large folios, cut from the 2 MiB blocks that free page reporting hands back whole).
The other way round, in the default experiment a tmpfs (4 KiB pages) took the cold fragments
of split 2 MiB blocks first and gained nothing from a hold in huge pages (1.3-1.8 s).
The cost belongs to the hypervisor, not to any layer, and it lands on a run by chance (how
long memory sat free before it): so each trial holds, from its start, as much memory as its
run will take fresh,
in the pages the stack's top takes (huge ones where the kernel gives them, 4 KiB ones for a
top whose layer has `small_pages`), and lets go of it right before the timed run, whose
allocations then reuse those pages. The hold is the trial's `phase_warm_memory_s`, outside
the timed run.

The kernel hands memory back in passes, 2 s after the first free since its last pass
(PAGE_REPORTING_DELAY), and a pass hands back whatever blocks are free then: a pass that
the trial's own frees set off (its preparation, the dropped caches) and that falls in the
timed run takes the just-released hold back before the run has used it, and the run pays
the host's faults after all. Measured here, 512M `dd conv=fsync` onto ext4 on a memory-backed
loop device, held as above, 20 rounds a second apart, let go of at once or after that pass
(the count of memory handed back moves, then holds for 0.1 s; or 2.1 s pass without a move):
0.257-1.400 s at once (2 rounds slow), 0.261-0.323 s after the pass, which took 0.21-2.12 s to
wait for (median 2.11: mostly no pass came; `python3 bench/reporting_pass.py`, 2026-12-06). A
plan's `wait_reporting_pass` makes each trial wait so (`wait_for_reporting_pass`), outside the
timed run; it is off by default for what it costs (up to 2.1 s a trial)."""

import contextlib
import mmap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from layerbench.core.facts import Fact, declare
from layerbench.linux import procfs
from layerbench.observe import kernelstats

WARM_MEMORY_BYTES = Fact(
    "warm_memory_bytes",
    "before",
    "memory held written from the trial's start until right before the run",
    int,
)
REPORTING_WAITED_S = Fact(
    "reporting_waited_s",
    "before",
    "seconds waited, right before the run, for the pass of free page reporting the trial's frees set off",
    float,
)
REPORTING_PASS_KIB = Fact(
    "reporting_pass_kib", "before", "KiB that pass handed back to the hypervisor while waited for", int
)
declare(WARM_MEMORY_BYTES, REPORTING_WAITED_S, REPORTING_PASS_KIB)

# Slack over the run's own data: directories, inodes, the child's own pages.
_SLACK = 1.1
_SLACK_BYTES = 32 << 20
# Never hold more than this share of the memory available when the trial starts.
_AVAILABLE_SHARE = 0.5
_TOUCH_CHUNK = 64 << 20
# The kernel's delay from a free to its pass over the free memory (PAGE_REPORTING_DELAY, 2 s),
# and a little over it: with no pass by then, none was due.
_PASS_DUE_S = 2.1
# A pass has ended once the count of memory handed back holds this long.
_PASS_ENDED_S = 0.1
_POLL_S = 0.02


def wanted() -> bool:
    """Whether this kernel hands free memory back (it counts what it reported)."""
    return kernelstats.read_reported_kib() is not None


def _available_bytes() -> int:
    return procfs.available_memory() or 0


@dataclass
class Held:
    """Memory held for one trial; release() right before the timed run."""

    nbytes: int
    seconds: float
    _mapping: mmap.mmap | None = field(default=None, repr=False)

    def release(self) -> None:
        if self._mapping is not None:
            self._mapping.close()
            self._mapping = None

    def facts(self) -> dict[str, int]:
        return {WARM_MEMORY_BYTES.key: self.nbytes}


def _touch(mapping: mmap.mmap, nbytes: int) -> None:
    """Write every page, so that each is backed now (in the guest and in the host)."""
    zeros = bytes(min(nbytes, _TOUCH_CHUNK))
    for offset in range(0, nbytes, len(zeros)):
        end = min(nbytes, offset + len(zeros))
        mapping[offset:end] = zeros[: end - offset]


@contextlib.contextmanager
def held(run_bytes: int, *, huge: bool = True) -> Iterator[Held]:
    """Map and touch what a run of `run_bytes` will take fresh, capped at half
    the available memory; always let go on the way out."""
    nbytes = 0
    if run_bytes > 0:
        nbytes = min(int(run_bytes * _SLACK) + _SLACK_BYTES, int(_available_bytes() * _AVAILABLE_SHARE))
    began = time.monotonic()
    mapping = None
    if nbytes > 0:
        mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        with contextlib.suppress(AttributeError, OSError):  # no THP: small pages, still a help
            mapping.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
        _touch(mapping, nbytes)
    handle = Held(nbytes if mapping else 0, time.monotonic() - began, mapping)
    try:
        yield handle
    finally:
        handle.release()


@dataclass(frozen=True)
class ReportingPass:
    """The wait, right before a run, for the pass of free page reporting already due."""

    waited_s: float
    reported_kib: int

    def facts(self) -> dict[str, float | int]:
        return {REPORTING_WAITED_S.key: self.waited_s, REPORTING_PASS_KIB.key: self.reported_kib}


def wait_for_reporting_pass(hold: Held) -> ReportingPass:
    """Where memory is held for a run, wait until the pass of free page reporting that the
    trial's frees set off has handed its memory back (the count moves, then holds), or until
    none can still be due: so that no pass takes the hold back during the run."""
    first = kernelstats.read_reported_kib() if hold.nbytes else None
    if first is None:
        return ReportingPass(0.0, 0)
    began = time.monotonic()
    last, moved_at = first, None
    while (now := time.monotonic()) - began < _PASS_DUE_S:
        if moved_at is not None and now - moved_at >= _PASS_ENDED_S:
            break
        time.sleep(_POLL_S)
        current = kernelstats.read_reported_kib()
        if current is not None and current != last:
            last, moved_at = current, time.monotonic()
    return ReportingPass(time.monotonic() - began, last - first)
