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
in a flex group (or one of the next `reach`) where a trial freed inodes less than RECENT_S
ago, made again under another name
(Orlov starts its search from a hash of the name, and each try's name is random: the same
names in every new results file put each trial where the run before had just freed its
inodes) up to ATTEMPTS times; the one kept (the first clear one, else the one freed longest
ago) is renamed to the trial's directory. The flex groups to avoid outlive the run in the
scratch root (STATE), so the next run on it keeps away from them too. Nothing of the run
changes: only where, on the same file system, its files go. How long before a trial had
ended in the kept flex group is a fact of the run (`inode_group_freed_s_ago`, read before its
clock starts), and a covariate the reports test against the run's time.

Measured the same way, each side after six quiet minutes (`LAYERBENCH_INODE_PLACEMENT=off`
for the first): metadata runs in the slow mode 5 of 26 -> 0 of 26, their CV on the plain
directory 26.6 % -> 13.6 % and on the bind mount 22.1 % -> 11.7 %; the extracts' slow runs
(3 and 4 of 26) come from elsewhere and stayed. Those were found later (2026-12-07) to be the
same skipping, where a trial's files had gone on past its first flex group: every block a
trial freed inodes in is now kept clear (`ended`, fed by the teardown's walk of its tree)."""

import collections
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from layerbench.linux import mounts

RECENT_S = 365.0  # ext4's RECENTCY_MIN + RECENTCY_DIRTY (60 + 300 s) and a margin
# A trial's files start in its directory's flex group, which the probe sees, and spread on
# from there (traced with ext4:ext4_allocate_inode, docs/statistics.md: an extract's 11,000
# entries took 5 groups of one or two flex groups; metadata's 100,000 files in 10
# directories 14 groups of 2 or 3); every block where a trial freed MATERIAL inodes or more
# is kept clear. mke2fs makes flex groups of 16; the superblock that says so is not readable
# here, so a block of FLEX groups stands for one, and a small file system (a test's image of
# 32 groups without flex_bg) keeps away from the group alone.
FLEX = 16
FLEX_SHARE = 1 / 128  # of the groups: 16 of 2,048
# How many blocks past its first a new trial is kept clear of: as many as any trial of this
# run spread past its own first, at most REACH_MAX (a trial whose groups wrapped around the
# end of the file system would otherwise make every try look taken, and each block more a
# try must find clear leaves fewer tries clear: the file system's 128 blocks hold six
# minutes of a default experiment's trials only just).
REACH_MAX = 2
# A block is kept clear only where a trial freed at least this many inodes. Every allocation
# in a group checks again each recently freed inode before the free one it takes, so a few
# cost a run little next to the thousands a trial's tree leaves, while keeping a whole block
# clear for every trial that freed a handful (a stream-write's two files, an image's one)
# used up the file system's blocks: in a default experiment of 2026-12-07 (AMD EPYC host) 99
# of its 128 blocks were to be avoided at its end, and from its fifth round on all 8 tries
# of nearly every extract and metadata trial were taken.
MATERIAL = 64
ATTEMPTS = 16
SWITCH = "LAYERBENCH_INODE_PLACEMENT"  # "off": trials go where Orlov puts them (to measure it)
# The blocks trials ended in, with when each may be used again (epoch seconds), kept in the
# scratch root for the next run: the experiment after this one meets this one's freed inodes.
STATE = ".inode-groups.json"


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
    """The blocks of inode groups trials ended in, and until when a new trial keeps away from
    each; what the runs before on this scratch root left is read from its STATE file."""

    def __init__(self, root: Path) -> None:
        found = None if os.environ.get(SWITCH) == "off" else _no_journal_ext4(root)
        self.per_group = found[1] if found else None
        self.span = max(1, min(FLEX, int(found[0] * FLEX_SHARE))) if found else 1
        self.blocks = -(-found[0] // self.span) if found else 0
        self.state = root / STATE
        self._avoid_until: dict[int, float] = self._load() if found else {}
        self.reach = 0  # blocks past a try's own that must be clear too (see REACH_MAX)

    def _load(self) -> dict[int, float]:
        """The blocks still to avoid; an unreadable file counts as none (it only helps)."""
        try:
            stored = json.loads(self.state.read_text())
            now = time.time()
            return {int(block): float(until) for block, until in stored.items() if float(until) > now}
        except (OSError, ValueError, AttributeError, TypeError):
            return {}

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
        """Seconds since the latest trial ended in group's block or in the `reach` blocks
        after it (where a trial starting in group spreads to), if that was less than RECENT_S
        ago (None: no such trial)."""
        if group is None:
            return None
        first = group // self.span
        until = max(self._avoid_until.get(block, 0.0) for block in range(first, first + self.reach + 1))
        now = time.time()
        return now - (until - RECENT_S) if until > now else None

    def ended(self, freed: Mapping[int, int]) -> None:
        """A trial was torn down now, having freed inodes where these inode numbers lie (each
        standing for as many as its count): the blocks where it freed MATERIAL or more are
        kept clear."""
        if self.per_group is None:
            return
        per_block: collections.Counter[int] = collections.Counter()
        for inode, count in freed.items():
            per_block[(inode - 1) // self.per_group // self.span] += count
        # What a block cannot have held went on to the next: a directory's files start in
        # its block and go on from there (metadata makes its 10 directories before their
        # files, and its 100,000 files took 2 or 3 blocks, traced). A block of the root
        # holds the system's own files too, so half of it is taken as free.
        room = self.span * self.per_group // 2
        for block in sorted(per_block):
            over = per_block[block] - room
            for step in range(1, REACH_MAX + 1):
                if over <= 0:
                    break
                per_block[(block + step) % self.blocks] += min(over, room)
                over -= room
        blocks = {block for block, count in per_block.items() if count >= MATERIAL}
        if not blocks:
            return
        now = time.time()
        self._avoid_until = {b: t for b, t in self._avoid_until.items() if t > now}
        self._avoid_until.update(dict.fromkeys(blocks, now + RECENT_S))
        self.reach = max(self.reach, min(REACH_MAX, max(blocks) - min(blocks)))
        written = self.state.with_suffix(".tmp")
        try:  # only a help to the next run: a full disk must not fail this trial's teardown
            written.write_text(json.dumps(self._avoid_until))
            written.replace(self.state)
        except OSError:
            written.unlink(missing_ok=True)

    def forget_if_expired(self) -> None:
        """The STATE file goes once nothing in it is to be avoided any more."""
        if self.active and not any(until > time.time() for until in self._avoid_until.values()):
            self.state.unlink(missing_ok=True)


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
