"""The state of a shared file system (the scratch root's, the one holding loop images):
how full it is, how fragmented its free space is, and the mount options known to defer
work past the moment that caused it. Recorded in the host facts, so `compare` shows it.

Free-space fragmentation comes from the kernel where it can (ext4's buddy allocator in
/proc/fs/ext4/DEV/mb_groups needs no access to the device, which a guest may be denied),
else from e2freefrag (ext4) or xfs_db's freesp (xfs), read-only; elsewhere it is "not
measured", said so."""

import contextlib
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from layerbench.core.sizes import format_size
from layerbench.linux import mounts

LARGE_EXTENT = 1 << 20  # free space in extents of at least 1 MiB is "large"
# Mount options that make the file system do work later than the call that asked for it.
DEFERRED_WORK = {
    "discard": "online discard: deletions turn into discard requests the device works through later",
    "lazytime": "timestamps are written back later",
}
# ext4 without a journal discards freed blocks inside the call that frees them (no commit to
# batch them at): each unlink of a file with data waits for its own discard. Measured on this
# project's VM (root ext4, no journal, online discard): 3,000 unlinks of 4 KiB files took
# 0.445 s, 148 us each, and all 3,000 discards completed within them, none in the second after.
DISCARD_IN_THE_CALL = (
    "online discard without a journal: each deletion waits for the discard of its blocks "
    "(a device round trip inside the unlink)"
)
# ext4 without a journal does not reuse an inode freed in the last 60 s (300 s while its
# inode-table block is dirty; 5 s before Linux 5.7): a new file's inode search steps past
# every such inode, so creating many files where many were just deleted costs several times
# the system time.
NO_JOURNAL = (
    "no journal: inodes freed in the last 60-300 s are not reused, so creating files where "
    "many were just deleted is slow (each trial's directory is placed in a fresh inode group)"
)


def _mb_groups(source: str, block_size: int) -> dict[str, Any] | None:
    """ext4: the per-group buddy histogram (counts of free chunks of 2^k blocks)."""
    path = Path("/proc/fs/ext4") / Path(source).name / "mb_groups"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    free = frags = large = 0
    for line in lines:
        if not line.startswith("#") or line.startswith("#group"):
            continue
        head, _, histogram = line.partition("[")
        numbers = head.split(":", 1)[1].split()
        free += int(numbers[0])
        frags += int(numbers[1])
        for order, count in enumerate(int(v) for v in histogram.strip(" ]").split()):
            if (block_size << order) >= LARGE_EXTENT:
                large += count * (1 << order)
    return _fragmentation(free * block_size, frags, large * block_size, "ext4 mb_groups")


def _fragmentation(free_bytes: int, extents: int, large_bytes: int, source: str) -> dict[str, Any]:
    return {
        "free_extents": extents,
        "mean_free_extent_bytes": free_bytes // extents if extents else 0,
        "large_free_share": round(large_bytes / free_bytes, 4) if free_bytes else None,
        "from": source,
    }


def _e2freefrag(source: str) -> dict[str, Any] | None:
    text = _tool(["e2freefrag", source])
    if text is None:
        return None
    block = re.search(r"Blocksize: (\d+)", text)
    free = re.search(r"Free blocks: (\d+)", text)
    extents = re.search(r"Free extents: (\d+)", text)
    if not (block and free and extents):
        return None
    size = int(block.group(1))
    large = 0
    for low, unit, blocks in re.findall(r"^\s*(\d+)([KMGT])\.\.\.\s*\S+\s*:\s*\d+\s+(\d+)", text, re.M):
        if int(low) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit] >= LARGE_EXTENT:
            large += int(blocks)
    return _fragmentation(int(free.group(1)) * size, int(extents.group(1)), large * size, "e2freefrag")


def _xfs_freesp(source: str, block_size: int) -> dict[str, Any] | None:
    text = _tool(["xfs_db", "-r", "-c", "freesp -s", source])
    if text is None:
        return None
    extents = re.search(r"total free extents (\d+)", text)
    free = re.search(r"total free blocks (\d+)", text)
    if not (extents and free):
        return None
    large = sum(
        int(blocks)
        for low, _, blocks in re.findall(r"^\s*(\d+)\s+\d+\s+(\d+)\s+(\d+)", text, re.M)
        if int(low) * block_size >= LARGE_EXTENT
    )
    return _fragmentation(
        int(free.group(1)) * block_size, int(extents.group(1)), large * block_size, "xfs_db"
    )


def _tool(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _options(fstype: str, source: str, options: str) -> list[str]:
    """The mount options, with ext4's effective ones (which include defaults like commit=5)."""
    names = options.split(",")
    if fstype == "ext4":
        effective = Path("/proc/fs/ext4") / Path(source).name / "options"
        with contextlib.suppress(OSError):
            names = effective.read_text().split()
    return names


def describe(path: str | os.PathLike[str]) -> dict[str, Any]:
    fstype, source, options = mounts.filesystem_of(path)
    found: dict[str, Any] = {"type": fstype, "source": source, "options": options}
    try:
        usage = os.statvfs(path)
    except OSError:
        return found
    size = usage.f_blocks * usage.f_frsize
    used = usage.f_blocks - usage.f_bfree
    free = usage.f_bavail * usage.f_frsize
    found |= {
        "size_bytes": size,
        "free_bytes": free,
        # As df counts it: of the space a user may use (reserved blocks left out).
        "used_share": round(used / (used + usage.f_bavail), 4) if used + usage.f_bavail else None,
        "inodes_used_share": round(1 - usage.f_ffree / usage.f_files, 4) if usage.f_files else None,
    }
    effective = _options(fstype, source, options)
    found["deferred_work"] = sorted(
        {
            name.split("=")[0]
            for name in effective
            if name.split("=")[0] in DEFERRED_WORK and name != "nodiscard"
        }
    )
    if fstype == "ext4" and (journal := mounts.has_journal(source)) is not None:
        found["journal"] = journal
    fragmentation = None
    if fstype == "ext4":
        fragmentation = _mb_groups(source, usage.f_frsize) or _e2freefrag(source)
    elif fstype == "xfs":
        fragmentation = _xfs_freesp(source, usage.f_frsize)
    found["free_space"] = fragmentation or {"from": f"not measured for {fstype} here"}
    return found


def summary(state: dict[str, Any]) -> str:
    """One line for a report's host block."""
    parts = []
    if state.get("used_share") is not None:
        parts.append(f"{100 * state['used_share']:.0f} % used")
    free = state.get("free_space", {})
    if free.get("large_free_share") is not None:
        parts.append(
            f"{100 * free['large_free_share']:.0f} % of free space in extents of 1 MiB or more, "
            f"mean free extent {format_size(free['mean_free_extent_bytes'])} ({free['from']})"
        )
    elif "from" in free:
        parts.append(f"free-space fragmentation {free['from']}")
    for name in state.get("deferred_work", []):
        in_the_call = name == "discard" and state.get("journal") is False and state.get("type") == "ext4"
        parts.append(DISCARD_IN_THE_CALL if in_the_call else DEFERRED_WORK[name])
    if state.get("journal") is False:
        parts.append(NO_JOURNAL)
    return "; ".join(parts)
