"""Removing what a run made, one class per kind of resource, in a fixed teardown order.

Each kind removes a journaled resource (recover) and, whatever the journal says, finds and
removes what of its kind is still left under the scratch root (sweep): a process killed
between creating a resource and journaling it, or a mount(2) that was already under way
when its caller died and landed after the caller's journal was read.

Teardown order (phase): processes first (a live daemon keeps a mount busy and a dead
run's namespace alive; a dying child may still finish a mount), then mounts, deepest
first, then control groups, device-mapper mappings, md arrays, loop devices and, last, paths."""

import collections
import concurrent.futures
import contextlib
import os
import re
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from layerbench.core.errors import SetupError, UserError
from layerbench.linux import cgroups, devmapper, mdraid, mounts, procfs, system
from layerbench.scratch.journal import Resource
from layerbench.scratch.policy import inside

_GONE_WAIT_S = 10.0  # a killed process in the middle of a mount(2) dies when it returns


# ---- primitives ------------------------------------------------------------------------------


def unmount_path(target: str, *, hurry: bool = False) -> bool:
    """Unmount target if mounted; returns True if something was unmounted."""
    return unmount_reporting(target, hurry=hurry) is not None


def unmount_reporting(target: str, *, hurry: bool = False) -> str | None:
    """Unmount target if mounted, lazily as a last resort; what was done, or None."""
    if not mounts.is_mount_point(target):
        return None
    if hurry:
        mounts.unmount(target, lazy=True)
        return f"unmounted {target} (lazily: hurrying)"
    error = ""
    for attempt in range(10):
        try:
            mounts.unmount(target)
            return f"unmounted {target}"
        except SetupError as exc:
            # Busy right after a child exits (a daemon still closing files): wait, then lazy.
            error = str(exc)
            time.sleep(0.05 * (attempt + 1))
    mounts.unmount(target, lazy=True)
    return f"unmounted {target} (lazily: {error.splitlines()[-1] if error else 'busy'})"


def unmount_all_under(path: Path, *, hurry: bool = False) -> list[str]:
    """Unmount every mount under path, deepest first: what an interrupted setup mounted
    before it could register its own teardown. Returns what was done."""
    done = []
    for entry in sorted(mounts.mounts_under(path), key=lambda e: -len(e.mount_point)):
        if line := unmount_reporting(entry.mount_point, hurry=hurry):
            done.append(line)
    return done


def wait_gone(pids: list[int], timeout: float = _GONE_WAIT_S) -> list[int]:
    """Wait until these processes are gone or zombies; returns those still alive."""
    deadline = time.monotonic() + timeout
    while True:
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        alive = [pid for pid in pids if procfs.alive(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def stop_process(pid: int, start_time: str | None, *, hurry: bool = False) -> bool:
    """Stop pid if it is still the process we started (its start time matches)."""
    current = procfs.start_time(pid)
    if current is None or (start_time is not None and current != start_time):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL if hurry else signal.SIGTERM)
    if wait_gone([pid], 0.5 if hurry else 5.0):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_gone([pid])
    return True


def stop_process_group(pgid: int, start_time: str | None) -> bool:
    """Kill every process of a group we started (a timed child and what it forked) and wait
    until they are gone: one of them may be finishing a mount."""
    leader_start = procfs.start_time(pgid)
    if leader_start is not None and start_time is not None and leader_start != start_time:
        return False  # the id was reused by another process: not ours
    members = procfs.group_members(pgid)
    for pid in members:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_gone(members)
    return bool(members)


def stop_processes_under(path: Path) -> tuple[list[str], list[str]]:
    """Kill every process whose command line, working directory or root points into path
    (never this process or the ones that started it) and wait until they are gone: a helper
    whose pid never reached its owner (a signal right after its start) would mount later.
    Returns (what was stopped, what did not die)."""
    spared = procfs.ancestors(os.getpid())
    found = [pid for pid in procfs.pids() if pid not in spared and _points_into(pid, path)]
    said = [f"stopped pid {pid} ({_describe(pid)}), which used {path}" for pid in found]
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    stuck = [
        f"pid {pid} ({_describe(pid)}) did not die within {_GONE_WAIT_S:.0f} s" for pid in wait_gone(found)
    ]
    return said, stuck


def remove_path(target: str, root: Path) -> collections.Counter[int] | None:
    """Delete a file or tree of ours; what it freed (remove_tree), or None if nothing was there."""
    path = Path(target)
    if not inside(path, root):
        raise UserError(f"journal names {target}, which is outside the scratch root {root}")
    if not path.exists() and not path.is_symlink():
        return None
    if mounts.mounts_under(path):
        raise SetupError(f"{path} still has mounts under it; not deleting")
    if path.is_dir() and not path.is_symlink():
        return remove_tree(path)
    inode = path.lstat().st_ino
    path.unlink()
    return collections.Counter({inode: 1})


# Unlinks in flight at once. On an ext4 without a journal mounted with `discard` (this
# project's VMs) each unlink waits for its blocks' discard: one at a time (shutil.rmtree), a
# trial's 11,390-entry source tree took 2.0-2.8 s to delete (`rm -rf` 2.3 s, 0.65 s of it
# system time); 16 at a time 1.2-1.4 s. Every second of a teardown is a second the time
# budget cannot spend on runs.
_UNLINKS_AT_ONCE = 16


# A directory's blocks outlive the entries deleted from it, and about this many entries of
# short names fill one of 4 KiB: a directory of more blocks than one held at least as many.
_ENTRIES_A_BLOCK = 128


def remove_tree(top: Path) -> collections.Counter[int]:
    """shutil.rmtree's result (symbolic links removed, never followed), its unlinks side by
    side, then its directories (an rmdir frees a block too), deepest first. Returns where
    inodes were freed (scratch/placement.py): the inode number of each entry below top, read
    from the directories as they are walked, with how many inodes it stands for: 1 for a file,
    and for a directory also the entries its size says it once held (a workload that deleted
    its own files, such as metadata, freed them there during its run)."""
    files: list[str] = []
    inodes: collections.Counter[int] = collections.Counter()
    levels: list[list[str]] = []  # the directories at each depth below top
    pending = [(0, os.fspath(top))]
    while pending:
        depth, directory = pending.pop()
        if depth == len(levels):
            levels.append([])
        levels[depth].append(directory)
        with os.scandir(directory) as entries:
            for entry in entries:
                inodes[entry.inode()] += 1
                if entry.is_dir(follow_symlinks=False):
                    blocks = entry.stat(follow_symlinks=False).st_size // 4096
                    if blocks > 1:
                        inodes[entry.inode()] += blocks * _ENTRIES_A_BLOCK
                    pending.append((depth + 1, entry.path))
                else:
                    files.append(entry.path)
    with concurrent.futures.ThreadPoolExecutor(_UNLINKS_AT_ONCE) as pool:
        _each(pool, _unlink, files)
        for level in reversed(levels):
            _each(pool, os.rmdir, level)
    return inodes


def _each(
    pool: concurrent.futures.ThreadPoolExecutor, action: Callable[[str], None], names: list[str]
) -> None:
    if len(names) < _UNLINKS_AT_ONCE:  # not worth the threads' hand-offs
        for name in names:
            action(name)
        return
    for _ in pool.map(action, names, chunksize=max(1, min(64, len(names) // _UNLINKS_AT_ONCE))):
        pass


def _unlink(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # gone already: a teardown started again
        os.unlink(name)


# ---- one class per kind ------------------------------------------------------------------------


@dataclass
class Recovery:
    """One clean of one scratch root: what it removed and what it could not."""

    root: Path
    removed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class ResourceKind(ABC):
    """How one kind of resource is removed after a crash."""

    name: ClassVar[str]  # as written in the journal
    phase: ClassVar[int]  # teardown order: lower first

    @abstractmethod
    def recover(self, resource: Resource, recovery: Recovery) -> None:
        """Remove the journaled resource if it still exists; raise SetupError if it cannot be."""

    def sweep(self, recovery: Recovery) -> None:  # noqa: B027 - optional: most kinds are journaled only
        """Remove what of this kind is left under the root, journaled or not."""


class GroupKind(ResourceKind):
    """The timed child's process group."""

    name, phase = "group", 10

    def recover(self, resource: Resource, recovery: Recovery) -> None:
        pgid = resource.info.get("pgid")
        start = resource.info.get("start_time")
        if isinstance(pgid, int) and stop_process_group(pgid, start if isinstance(start, str) else None):
            recovery.removed.append(f"killed {resource.target} (process group {pgid})")


class ProcessKind(ResourceKind):
    """A helper daemon (bindfs, qemu). Found by its pid, or by the path its command line
    names when it was killed before its pid reached the journal."""

    name, phase = "process", 11

    def recover(self, resource: Resource, recovery: Recovery) -> None:
        pid = resource.info.get("pid")
        named = resource.info.get("named")
        if isinstance(pid, int):
            pids = [pid]
        elif isinstance(named, str) and inside(named, recovery.root):
            pids = [p for p in procfs.pids() if p != os.getpid() and _names(p, named)]
        else:
            pids = []
        start = resource.info.get("start_time")
        for found in pids:
            if stop_process(found, start if isinstance(start, str) else None, hurry=True):
                recovery.removed.append(f"stopped {resource.target} (pid {found})")

    def sweep(self, recovery: Recovery) -> None:
        """Any process whose command line, working directory or root points into the scratch
        root (never this process or the ones that started it)."""
        stopped, stuck = stop_processes_under(recovery.root)
        recovery.removed += stopped
        recovery.problems += stuck


class MountKind(ResourceKind):
    name, phase = "mount", 20

    def recover(self, resource: Resource, recovery: Recovery) -> None:
        if line := unmount_reporting(resource.target):
            recovery.removed.append(line)

    def sweep(self, recovery: Recovery) -> None:
        """Every mount under the root in this namespace's table, deepest first."""
        for _ in range(5):  # stacked mounts on one point come off one at a time
            found = sorted(mounts.mounts_under(recovery.root), key=lambda e: -len(e.mount_point))
            if not found:
                return
            for entry in found:
                try:
                    if line := unmount_reporting(entry.mount_point):
                        where = f"{entry.fstype} from {entry.source}"
                        recovery.removed.append(f"{line} (not in the journal: {where})")
                except SetupError as exc:
                    recovery.problems.append(f"cannot unmount {entry.mount_point}: {exc}")
                    return


class CgroupKind(ResourceKind):
    name, phase = "cgroup", 30

    def recover(self, resource: Resource, recovery: Recovery) -> None:
        if cgroups.remove(Path(resource.target)):
            recovery.removed.append(f"removed control group {resource.target}")

    def sweep(self, recovery: Recovery) -> None:
        for group in cgroups.groups_of(recovery.root):
            try:
                if cgroups.remove(group):
                    recovery.removed.append(f"removed control group {group} (not in the journal)")
            except SetupError as exc:
                recovery.problems.append(str(exc))


class DeviceMapperKind(ResourceKind):
    """Device-mapper mappings (a dm-crypt layer's), named after the root: after the mounts
    on them, before the loop devices under them."""

    name, phase = "dm", 35

    def recover(self, resource: Resource, recovery: Recovery) -> None:
        # The target names a prefix: a dm-crypt layer's one mapping, or an LVM volume group's.
        for name in devmapper.remove_all(Path(resource.target).name):
            recovery.removed.append(f"removed the device-mapper mapping {name}")

    def sweep(self, recovery: Recovery) -> None:
        for prefix in devmapper.prefixes_of(recovery.root):
            try:
                for name in devmapper.remove_all(prefix):
                    recovery.removed.append(f"removed the device-mapper mapping {name} (not in the journal)")
            except SetupError as exc:
                recovery.problems.append(str(exc))


class MdKind(ResourceKind):
    """md arrays (an md-raid1 layer's), found by their members: loop devices over images in
    the root. After the mappings that may stand on them, before those loop devices."""

    name, phase = "md", 37

    def recover(self, resource: Resource, recovery: Recovery) -> None:
        self.sweep(recovery)

    def sweep(self, recovery: Recovery) -> None:
        ours = {name for name, _ in loop_devices(recovery.root)}
        for array in mdraid.arrays():
            if ours & set(mdraid.members(array)):
                try:
                    if mdraid.stop(array):
                        recovery.removed.append(f"stopped the md array /dev/{array}")
                except SetupError as exc:
                    recovery.problems.append(str(exc))


class LoopKind(ResourceKind):
    """Loop devices over image files in the root. mount -o loop detaches its device by
    itself, but a killed run's namespace is torn down asynchronously: give the kernel a
    moment first, then detach what is still bound and not mounted."""

    name, phase = "loop", 40

    def recover(self, resource: Resource, recovery: Recovery) -> None:
        self.sweep(recovery)

    def sweep(self, recovery: Recovery) -> None:
        deadline = time.monotonic() + 5
        while loop_devices(recovery.root) and time.monotonic() < deadline:
            time.sleep(0.1)
        in_use = {entry.source for entry in mounts.mount_table()}
        for name, backing in loop_devices(recovery.root):
            if f"/dev/{name}" in in_use:
                recovery.problems.append(f"/dev/{name} ({backing}) is still mounted")
                continue
            try:
                system.run(["losetup", "--detach", f"/dev/{name}"])
                recovery.removed.append(f"detached /dev/{name} ({backing})")
            except SetupError as exc:
                if mounts.loop_backing_file(name):  # not detached by the kernel meanwhile
                    recovery.problems.append(f"cannot detach /dev/{name} ({backing}): {exc}")


_LOOP_QUEUE_SETTING = re.compile(r"^/sys/block/(loop\d+)/queue/[a-z_]+$")


def read_setting(path: Path) -> str:
    """A sysfs setting's value; of a choice like `[none] mq-deadline`, the chosen one."""
    text = path.read_text().strip()
    chosen = re.search(r"\[([^]]+)\]", text)
    return chosen[1] if chosen else text


class SettingKind(ResourceKind):
    """A setting of one of our loop devices' queues (its I/O scheduler): the queue outlives
    the binding, so the value it had is written back, unless the device now serves someone
    else's file."""

    name, phase = "setting", 45

    def recover(self, resource: Resource, recovery: Recovery) -> None:
        old = resource.info.get("old")
        found = _LOOP_QUEUE_SETTING.match(resource.target)
        if not isinstance(old, str) or found is None or not Path(resource.target).exists():
            return
        backing = mounts.loop_backing_file(found[1])
        if backing and not inside(backing.removesuffix(" (deleted)"), recovery.root):
            return  # bound again, to another's file: theirs now
        if read_setting(Path(resource.target)) != old:
            Path(resource.target).write_text(old + "\n")
            recovery.removed.append(f"restored {resource.target} to {old}")


class PathKind(ResourceKind):
    name, phase = "path", 50

    def recover(self, resource: Resource, recovery: Recovery) -> None:
        if remove_path(resource.target, recovery.root) is not None:
            recovery.removed.append(f"deleted {resource.target}")


KINDS: dict[str, ResourceKind] = {
    kind.name: kind
    for kind in (
        GroupKind(),
        ProcessKind(),
        MountKind(),
        CgroupKind(),
        DeviceMapperKind(),
        MdKind(),
        LoopKind(),
        SettingKind(),
        PathKind(),
    )
}


def loop_devices(root: Path) -> list[tuple[str, str]]:
    """(device, backing file) of loop devices whose image lives in root."""
    found = []
    for name in sorted(os.listdir("/sys/block")):
        backing = mounts.loop_backing_file(name) if name.startswith("loop") else None
        if backing and inside(backing.removesuffix(" (deleted)"), root):
            found.append((name, backing))
    return found


def _names(pid: int, path: str) -> bool:
    return any(path.encode() in arg for arg in procfs.cmdline(pid))


def _points_into(pid: int, root: Path) -> bool:
    prefix = str(root).rstrip("/") + "/"
    if any(arg.startswith(prefix.encode()) or prefix.encode() in arg for arg in procfs.cmdline(pid)):
        return True
    return any(
        (where := procfs.link(pid, name)) is not None and (where + "/").startswith(prefix)
        for name in ("cwd", "root")
    )


def _describe(pid: int) -> str:
    argv = [arg.decode(errors="replace") for arg in procfs.cmdline(pid) if arg]
    return " ".join(argv)[:80] or "exited"


def clean(pending: list[Resource], root: Path, done: Callable[[int], None]) -> Recovery:
    """Remove every pending resource in teardown order, then sweep each kind; a resource
    is marked done only once removed. Nothing here raises: what cannot be removed is a
    problem line."""
    recovery = Recovery(root)
    for phase in sorted({kind.phase for kind in KINDS.values()}):
        kinds = [kind for kind in KINDS.values() if kind.phase == phase]
        for kind in kinds:
            for resource in reversed([r for r in pending if r.kind == kind.name]):
                try:
                    kind.recover(resource, recovery)
                except (SetupError, UserError, OSError) as exc:
                    recovery.problems.append(f"{resource.kind} {resource.target}: {exc}")
                    continue
                done(resource.ident)
            kind.sweep(recovery)
    unknown = [r for r in pending if r.kind not in KINDS]
    recovery.problems += [f"journal entry of unknown kind {r.kind!r}: {r.target}" for r in unknown]
    return recovery
