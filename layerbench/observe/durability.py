"""The durability check: a workload that claims its data is durable when its timed run ends
(stream-write's fsync, extract's syncfs, a fio job's end_fsync) must have moved its bytes to
the lowest device of the stack inside that run. Otherwise the data is still dirty in some
page cache below (a layer that does not pass syncfs down: bindfs without the sync of the
file systems under it) and the run measured less than it claims.

Two readings, both needed: reached, the bytes written to the stack's bottom device (the disk
behind a loop device) between the run's start and end, must be at least SHARE x claimed; and
dirty, the bytes of the trial's own files on the scratch file system (the directories and
image files under the stack) still dirty or under writeback right after the run, read per
file (cachestat), must be at most (1 - SHARE) x claimed. Other writers on the disk can only
add to reached, so it alone can hide a miss (beside `stress-ng --hdd`, 528 MiB reached the
disk during a run whose 64 MiB stayed dirty below the FUSE layer: docs/flakes.md); dirty is
the trial's files' own and no neighbour moves it; in a vm stack it is the guest's reading of
its own files (no reading on the host sees the guest's page cache) plus the host's of the
disk image. A kernel without cachestat leaves the verdict to reached. A stack that keeps its
data in memory (tmpfs) has no device and is not checked."""

from typing_extensions import TypedDict  # pydantic validates it before Python 3.12

from layerbench.core.facts import Fact, declare
from layerbench.core.runs import RunRecord
from layerbench.core.sizes import format_size


class Durability(TypedDict, total=False):
    """The durability fact of a run (dirty_bytes: absent in a store of an older layerbench)."""

    claimed_bytes: int
    reached_bytes: int
    dirty_bytes: int | None
    device: str
    durable: bool


DURABILITY = Fact(
    "durability",
    "after",
    "whether the bytes the workload claims durable reached the stack's bottom device",
    Durability,
)
declare(DURABILITY)

SHARE = 0.9


def check(
    claimed: int | None,
    devices: list[str],
    per_device: dict[str, dict[str, int]],
    dirty: int | None = None,
) -> Durability | None:
    """The run's durability fact, or None when there is nothing to check. dirty: the bytes of
    the trial's files below the stack still dirty after the run (None: not known)."""
    if not claimed or not devices or devices[-1] not in per_device:
        return None
    reached = per_device[devices[-1]].get("write_bytes", 0)
    stayed_dirty = dirty is not None and dirty > (1 - SHARE) * claimed
    return {
        "claimed_bytes": claimed,
        "reached_bytes": reached,
        "dirty_bytes": dirty,
        "device": devices[-1],
        "durable": reached >= SHARE * claimed and not stayed_dirty,
    }


def describe(fact: Durability) -> str:
    claimed = format_size(fact.get("claimed_bytes", 0))
    dirty = fact.get("dirty_bytes")  # absent in a store of an older layerbench
    if dirty is not None and dirty > (1 - SHARE) * fact.get("claimed_bytes", 0):
        return f"{format_size(dirty)} of {claimed} was still dirty below the stack when the run ended"
    reached = format_size(fact.get("reached_bytes", 0))
    return f"only {reached} of {claimed} reached {fact.get('device', '?')} inside the timed run"


def warnings(runs: list[RunRecord]) -> list[str]:
    """One line per stack and workload with runs that did not make their data durable."""
    missed: dict[tuple[str, str], list[tuple[RunRecord, Durability]]] = {}
    for run in runs:
        fact = run.fact(DURABILITY)
        if run.ok and fact and not fact.get("durable", True):
            missed.setdefault((run.stack, run.workload), []).append((run, fact))
    found = []
    for (stack, workload), group in missed.items():
        first, fact = group[0]
        found.append(
            f"not durable: {stack}/{workload}: {len(group)} run(s) where {describe(fact)} (rep "
            f"{first.rep + 1}); a layer of the stack does not pass the workload's sync down, "
            f"so the time left out the write-back"
        )
    return found
