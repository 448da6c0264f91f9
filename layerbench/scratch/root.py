"""An opened scratch root: its lock (one run at a time), its journal, and the context
managers through which every resource of a run is made (journaled before it exists)."""

import collections
import contextlib
import fcntl
import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

import layerbench.scratch.resources as resources
from layerbench.core import failpoints
from layerbench.core.errors import SetupError, UserError
from layerbench.linux import cgroups, devmapper, mdraid, mounts, procfs, system
from layerbench.scratch import placement
from layerbench.scratch.journal import Journal
from layerbench.scratch.policy import MARKER, check_root, inside


class Scratch:
    """An opened scratch root: holds the lock while a run or clean uses it.

    As a context manager: on the way out, tidied and unlocked, if this process locked it
    (one that could not take the lock leaves another process's journal alone)."""

    def __init__(self, root: Path) -> None:
        self.root = check_root(root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / MARKER).touch()
        self.journal = Journal(self.root / "journal.jsonl")
        self.hurry = False  # set by a second Ctrl-C: lazy unmounts, SIGKILL
        self._lock_handle: TextIO | None = None
        self._dir_idents: dict[str, int] = {}
        self.inode_groups = placement.InodeGroups(self.root)
        self.placed: placement.Placed | None = None  # the latest trial directory's placement

    def __enter__(self) -> "Scratch":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.locked:
            try:
                self.tidy()
            finally:
                self.unlock()

    # -- lock
    @property
    def locked(self) -> bool:
        return self._lock_handle is not None

    def lock(self, what: str) -> None:
        """Take the root for this process; what says who holds it, for a refused second run."""
        handle = open(self.root / "lock", "a+")  # noqa: SIM115 - held for the run's lifetime
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise UserError(
                f"scratch root {self.root} is in use by {holder}; wait for it or use another --scratch"
            ) from None
        self._lock_handle = handle
        self.describe_holder(what)

    def describe_holder(self, what: str) -> None:
        """Say who holds the lock (and, once known, which experiment)."""
        handle = self._lock_handle
        if handle is not None:
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} ({what})\n")
            handle.flush()

    def tidy(self) -> None:
        """After a clean finish: an empty journal, and no empty directory of the trials or
        of the sentinel's probes, remain."""
        self.journal.reset_if_clean()
        self.inode_groups.forget_if_expired()
        for parent in ("trials", "sentinel"):
            with contextlib.suppress(OSError):
                (self.root / parent).rmdir()

    def unlock(self) -> None:
        if self._lock_handle is not None:
            self._lock_handle.close()
            self._lock_handle = None

    # -- resources
    def new_dir(self, *parts: str) -> Path:
        """A fresh directory in the scratch root, journaled so clean can delete it."""
        path = self.root.joinpath(*parts)
        if path.exists():
            raise SetupError(f"{path} already exists")
        ident = self.journal.add("path", path)
        path.mkdir(parents=True)
        self._dir_idents[str(path)] = ident
        return path

    @contextlib.contextmanager
    def directory(self, *parts: str, trial: bool = True) -> Iterator[Path]:
        if trial:
            self._trials_parent(self.root.joinpath(*parts[:-1]))
            path = self._placed_dir(*parts)
        else:
            path = self.new_dir(*parts)
        try:
            yield path
        finally:
            if trial:  # every trial's teardown, also of a stack without mounts
                failpoints.reached("teardown")
            # A signal can land between a mount and the registration of its teardown (inside
            # ExitStack.enter_context), or between a helper's start and its pid reaching us:
            # what still runs in here or is mounted in here is ours, so it goes too, daemons
            # first (a live one could mount after the unmount).
            self.inode_groups.ended(self._tear_down(path))

    def _placed_dir(self, *parts: str) -> Path:
        """A trial's directory whose files do not start among inodes a recent trial freed
        (placement.py); where every try did, the one whose nearest freeing is oldest. Orlov
        starts its search from a hash of the new directory's name, so each try has a name of
        its own, and the one kept is renamed (its inode, and so its group, stays)."""
        final = self.new_dir(*parts)
        self.placed = None
        if not self.inode_groups.active:
            return final
        tried: dict[Path, placement.Placed] = {}
        for attempt in range(placement.ATTEMPTS):
            # A name of its own per try and per run: the same names (experiment 1's trial 5 in
            # every new results file) made Orlov put each trial where the one of the run before
            # had just freed its inodes, which this run's bookkeeping does not know.
            candidate = self.new_dir(*parts[:-1], f".{parts[-1]}.try{attempt}-{secrets.token_hex(4)}")
            group = self.inode_groups.group_of_files_in(candidate)
            tried[candidate] = placement.Placed(group, attempt + 1, self.inode_groups.freed_ago(group))
            if tried[candidate].freed_s_ago is None:
                break
        kept = placement.best(list(tried.values()))
        for candidate, placed in tried.items():
            if placed is kept:
                candidate.replace(final)  # onto the empty directory, whose name stays journaled
            else:
                candidate.rmdir()
            self.journal.done(self._dir_idents.pop(str(candidate)))
        self.placed = placement.Placed(kept.group, len(tried), kept.freed_s_ago)
        return final

    def _tear_down(self, path: Path) -> collections.Counter[int]:
        """Stop, unmount and delete what is under a directory, then close its journal entry;
        returns where it freed inodes (resources.remove_tree, placement.py).
        The first Ctrl-C raises KeyboardInterrupt wherever the main thread is, also half-way
        through deleting a tree: the teardown then starts again (it is idempotent) and the
        interrupt is raised once it is done, so a stopped run leaves nothing behind. A second
        Ctrl-C only hurries (lazy unmounts, SIGKILL) and raises nothing, so this ends."""
        interrupted: KeyboardInterrupt | None = None
        freed: collections.Counter[int] = collections.Counter()
        while True:
            try:
                resources.stop_processes_under(path)
                resources.unmount_all_under(path, hurry=self.hurry)
                freed.update(resources.remove_path(str(path), self.root) or {})
                break
            except KeyboardInterrupt as exc:
                if interrupted is not None:
                    raise
                interrupted = exc
        self.journal.done(self._dir_idents.pop(str(path)))
        if interrupted is not None:
            raise interrupted
        return freed

    def _trials_parent(self, parent: Path) -> None:
        """Each trial's directory goes into an inode group of its own (ext4's Orlov
        allocator), not beside the previous trial's: on ext4 without a journal the inodes a
        trial just freed stay unusable for 60-300 s, and a next trial creating files among them
        spent 3-6x the system time (metadata, 20,000 files: 1.2 s against 0.22 s, bimodal)."""
        if not parent.exists():
            parent.mkdir(parents=True)
            system.spread_subdirectories(parent)

    @contextlib.contextmanager
    def mounted(
        self,
        source: str,
        target: Path,
        *,
        fstype: str | None = None,
        options: list[str] | None = None,
        bind: bool = False,
        readonly_bind: bool = False,
        via: list[str] | None = None,
    ) -> Iterator[Path]:
        """Mount inside the scratch root; unmount on the way out, whatever happens."""
        if not inside(target, self.root):
            raise UserError(f"refusing to mount over {target}: it is outside the scratch root")
        ident = self.journal.add("mount", target)
        try:
            mounts.mount(source, target, fstype=fstype, options=options, bind=bind, via=via)
            if readonly_bind:
                mounts.remount_readonly_bind(target)
            yield target
        finally:
            resources.unmount_path(str(target), hurry=self.hurry)
            failpoints.reached("teardown")
            self.journal.done(ident)

    @contextlib.contextmanager
    def process(
        self, start: Callable[[], "subprocess.Popen[bytes]"], label: str, *, named: Path
    ) -> Iterator["subprocess.Popen[bytes]"]:
        """A helper daemon: start() starts it and returns it; it is stopped on the way out.

        named is a path in this root that the daemon's command line carries: a kill between
        the start and the pid reaching the journal still leaves clean a way to find it."""
        if not named.is_relative_to(self.root):
            raise SetupError(f"a helper process must name a path in {self.root}, not {named}")
        ident = self.journal.add("process", label, named=str(named))
        child = start()
        try:  # from here on, whatever happens stops it (a signal at the next line too)
            failpoints.reached("helper-started")  # started, its pid not yet journaled
            self.journal.update(ident, pid=child.pid, start_time=procfs.start_time(child.pid))
            yield child
        finally:
            resources.stop_process(child.pid, None, hurry=self.hurry)
            child.poll()  # reaped above; lets the Popen know, so that it never waits for it
            self.journal.done(ident)

    @contextlib.contextmanager
    def setting(self, path: Path, value: str) -> Iterator[str]:
        """A queue setting of one of our loop devices, written and put back on the way out;
        yields the value it had."""
        old = resources.read_setting(path)
        ident = self.journal.add("setting", path, old=old)
        try:
            try:
                path.write_text(value + "\n")
            except OSError as exc:
                raise SetupError(f"cannot write {value!r} to {path}: {exc.strerror}") from None
            yield old
        finally:
            with contextlib.suppress(OSError):
                if resources.read_setting(path) != old:
                    path.write_text(old + "\n")
            self.journal.done(ident)

    @contextlib.contextmanager
    def loop_device(self, image: Path, arguments: list[str]) -> Iterator[str]:
        """A loop device over an image file in this root (losetup with arguments, e.g. a
        sector size), detached on the way out; found again by clean from its backing file."""
        if not image.is_relative_to(self.root):
            raise UserError(f"refusing to attach {image}: outside the scratch root")
        ident = self.journal.add("loop", image)
        device = system.run(["losetup", "--find", "--show", *arguments, str(image)]).strip()
        try:
            yield device
        finally:
            with contextlib.suppress(SetupError):
                system.run(["losetup", "--detach", device])
            self.journal.done(ident)

    @contextlib.contextmanager
    def dm_mappings(self, label: str, create: Callable[[str], str], *, lvm: bool = False) -> Iterator[str]:
        """Device-mapper mappings named after this root: create(name) makes them (a dm-crypt
        mapping of that name, or an LVM volume group of that name and its volumes) and returns
        the device to use; every mapping whose name starts so is removed on the way out, and
        found again by clean. Yields what create returned."""
        name = devmapper.mapping_name(self.root, label)
        prefix = devmapper.lvm_mapping_prefix(name) if lvm else name
        ident = self.journal.add("dm", Path("/dev/mapper", prefix))
        try:
            yield create(name)
        finally:
            devmapper.remove_all(prefix)
            self.journal.done(ident)

    @contextlib.contextmanager
    def md_array(self, members: list[str], create: Callable[[], None]) -> Iterator[str]:
        """An md array of loop devices of this root: create() makes it; it is stopped on the
        way out, and found again by clean from its members. Yields its device path."""
        ident = self.journal.add("md", members[0])
        try:
            create()
            array = mdraid.array_of(Path(members[0]).name)
            if array is None:
                raise SetupError(f"no md array holds {members[0]} after mdadm --create")
            yield f"/dev/{array}"
        finally:
            if (found := mdraid.array_of(Path(members[0]).name)) is not None:
                mdraid.stop(found)
            self.journal.done(ident)

    @contextlib.contextmanager
    def cgroup(self, hierarchy: cgroups.Hierarchy, label: str) -> Iterator[Path]:
        """A control group named after this root; what is left inside is killed on removal."""
        path = hierarchy.parent / cgroups.group_name(self.root, label)
        ident = self.journal.add("cgroup", path)
        try:
            yield cgroups.create(hierarchy, path.name)
        finally:
            cgroups.remove(path)
            self.journal.done(ident)

    # -- recovery
    def loop_devices(self) -> list[tuple[str, str]]:
        """(device, backing file) of loop devices whose image lives in this root."""
        return resources.loop_devices(self.root)

    def clean(self) -> resources.Recovery:
        """Remove what an earlier, crashed run left, journaled or not (see resources)."""
        recovery = resources.clean(self.journal.pending(), self.root, self.journal.done)
        if not recovery.problems:
            self.tidy()
        return recovery
