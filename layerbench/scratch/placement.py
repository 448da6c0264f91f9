"""Where a trial's files land on an ext4 without a journal: not among the inodes that an
earlier trial of this run freed in the last six minutes.

ext4 without a journal does not hand out an inode freed in the last 60 s, or 360 s while
the block of the inode table that holds it is dirty (and a run that allocates beside it
dirties it). Allocating each new inode it scans the group from its start and checks every
free inode it meets against that rule, so a run creating thousands of files in a group where
a trial deleted thousands spends most of its system time there: measured on this project's
VM (2026-12-03, `perf record -a -g` over an experiment of extract and metadata on a plain
directory and a bind mount, 12 repetitions each), the slow runs (3 of 26 metadata runs at
1.9-2.6 s against 1.1-1.5 s, 6 of 27 extracts) had 35-55 % of their samples under
`__ext4_new_inode` -> `find_inode_bit` -> `recently_deleted`, the others under 1 %. And
ext4's Orlov allocator tends to put a new top directory exactly there: it prefers the flex
group with the fewest directories, which a trial just emptied is.

So a trial's directory is made, its files' group probed (a probe file's inode: a file goes
to the first group with free inodes in its directory's flex group), and, when that group lies
within NEARBY groups of one where a trial ended less than RECENT_S ago, made again under
another name (Orlov starts its search from a hash of the name) up to ATTEMPTS times; the one
kept (the first clear one, else the one whose nearest trial ended longest ago) is renamed to
the trial's directory. Nothing of the run changes: only where, on the same file system, its
files go. How long before a trial had ended near the kept group is a fact of the run
(`inode_group_freed_s_ago`, read before its clock starts), and so a covariate the reports test
against the run's time: trials that free many inodes back to back (the budget's later rounds
of extract and metadata) can leave no group clear on a file system of few flex groups.

Measured the same way, each side after six quiet minutes (`LAYERBENCH_INODE_PLACEMENT=off`
for the first): metadata runs in the slow mode 5 of 26 -> 0 of 26, their CV on the plain
directory 26.6 % -> 13.6 % and on the bind mount 22.1 % -> 11.7 %; the extracts' slow runs
(3 and 4 of 26) come from elsewhere and stayed."""

import os
import time
from dataclasses import dataclass
from pathlib import Path

from layerbench.linux import mounts

RECENT_S = 365.0  # ext4's RECENTCY_MIN + RECENTCY_DIRTY (60 + 300 s) and a margin
# A trial's files spread from its directory's group over the next ones (a group per
# subdirectory of 1,000 files: 20,000 files took groups g to g+9 of 2,048 here); a small
# file system keeps away from the group alone.
NEARBY = 16
NEARBY_SHARE = 1 / 128  # of the groups: 16 of 2,048
ATTEMPTS = 8
SWITCH = "LAYERBENCH_INODE_PLACEMENT"  # "off": trials go where Orlov puts them (to measure it)


def _no_journal_ext4(root: Path) -> tuple[int, int] | None:
    """(groups, inodes per group) when root's file system is an ext4 without a journal."""
    entry = mounts.mount_of(root)
    if entry.fstype != "ext4":
        return None
    if mounts.has_journal(entry.source) is not False:
        return None
    try:
        lines = (Path("/proc/fs/ext4") / Path(entry.source).name / "mb_groups").read_text().splitlines()
    except OSError:
        return None
    groups = sum(1 for line in lines[1:] if line.startswith("#"))
    inodes = os.statvfs(root).f_files
    if groups <= 0 or inodes % groups:
        return None
    return groups, inodes // groups


class InodeGroups:
    """The inode groups trials ended in, and until when a new trial keeps away from each."""

    def __init__(self, root: Path) -> None:
        found = None if os.environ.get(SWITCH) == "off" else _no_journal_ext4(root)
        self.per_group = found[1] if found else None
        self.nearby = min(NEARBY, int(found[0] * NEARBY_SHARE)) if found else 0
        self._avoid_until: dict[int, float] = {}

    @property
    def active(self) -> bool:
        return self.per_group is not None

    def group_of_files_in(self, directory: Path) -> int | None:
        """The inode group where files made in directory go (a probe file's)."""
        if self.per_group is None:
            return None
        probe = directory / ".placement-probe"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            inode = os.fstat(fd).st_ino
        finally:
            os.close(fd)
            probe.unlink()
        return (inode - 1) // self.per_group

    def recent(self, group: int | None) -> bool:
        return self.freed_ago(group) is not None

    def freed_ago(self, group: int | None) -> float | None:
        """Seconds since the latest trial ended within nearby groups of group, if that was
        less than RECENT_S ago (None: no such trial)."""
        now = time.monotonic()
        ends = [
            until - RECENT_S
            for ended, until in self._avoid_until.items()
            if group is not None and abs(group - ended) <= self.nearby and until > now
        ]
        return now - max(ends) if ends else None

    def ended(self, group: int | None) -> None:
        """A trial whose files started in group was torn down now."""
        if group is None:
            return
        now = time.monotonic()
        self._avoid_until = {g: t for g, t in self._avoid_until.items() if t > now}
        self._avoid_until[group] = now + RECENT_S


@dataclass(frozen=True)
class Placed:
    """Where a trial's directory was kept: its files' group, the tries it took, and how long
    before a trial had ended near that group (None: none in the last RECENT_S), a pre-run
    figure of the run to come (read before its clock starts)."""

    group: int | None
    tries: int
    freed_s_ago: float | None


def best(tries: list[Placed]) -> Placed:
    """The try to keep: the first away from every recent trial, else the one whose nearest
    recent trial ended longest ago (ext4 forgets a freed inode sooner the older it is)."""
    clear = [t for t in tries if t.freed_s_ago is None]
    if clear:
        return clear[0]
    return max(tries, key=lambda t: t.freed_s_ago or 0.0)
