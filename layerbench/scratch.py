"""The scratch root: the only place layerbench creates, mounts and deletes things.

It holds a marker (so we never mistake someone else's directory for ours), a lock
(one run at a time), and a journal: every resource is written down *before* it is
created and marked done after it is removed, so a run killed with SIGKILL can be
cleaned up by the next start.
"""

import contextlib
import fcntl
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from layerbench import cgroups, failpoints, mounts, system
from layerbench.errors import SetupError, UserError

MARKER = ".layerbench-scratch"
DEFAULT_ROOT = Path("/var/tmp/layerbench")
_FORBIDDEN = ("/proc", "/sys", "/dev", "/run", "/boot", "/etc", "/usr", "/bin", "/sbin", "/lib")


def check_root(root: Path) -> Path:
    """Refuse a scratch root that could hold something that is not ours."""
    resolved = Path(os.path.realpath(root))
    text = str(resolved)
    if text == "/":
        raise UserError(f"scratch root {root}: refusing '/'; choose a directory such as {DEFAULT_ROOT}")
    for forbidden in _FORBIDDEN:
        if text == forbidden or text.startswith(forbidden + "/"):
            raise UserError(f"scratch root {root}: refusing a path under {forbidden}")
    if resolved.exists() and not resolved.is_dir():
        raise UserError(f"scratch root {root}: exists and is not a directory")
    if resolved.exists() and mounts.is_mount_point(resolved):
        raise UserError(
            f"scratch root {root}: is a mount point layerbench did not create; "
            "choose a fresh directory under it"
        )
    if resolved.exists() and any(resolved.iterdir()) and not (resolved / MARKER).exists():
        raise UserError(
            f"scratch root {root}: exists, is not empty and was not made by layerbench; "
            "choose an empty or new directory"
        )
    return resolved


# ---- the journal -----------------------------------------------------------------------


@dataclass
class Resource:
    ident: int
    kind: str  # "mount", "process", "path", "cgroup"
    target: str
    info: dict[str, object]


def _process_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


class Journal:
    """Append-only JSON lines: {"add": {...}} before creating, {"done": id} after removing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._next = 1 + max((r.ident for r in self.pending()), default=0)

    def _append(self, record: dict[str, object]) -> None:
        # A write(2) survives SIGKILL of this process, which is what the journal is for;
        # an fsync would cost milliseconds, and the journal is written around timed runs.
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def add(self, kind: str, target: str | os.PathLike[str], **info: object) -> int:
        ident = self._next
        self._next += 1
        self._append({"add": {"id": ident, "kind": kind, "target": str(target), **info}})
        return ident

    def update(self, ident: int, **info: object) -> None:
        """Add facts learned after creation (a daemon's pid)."""
        self._append({"update": {"id": ident, **info}})

    def done(self, ident: int) -> None:
        self._append({"done": ident})

    def pending(self) -> list[Resource]:
        """Resources added and not yet marked done, oldest first."""
        if not self.path.exists():
            return []
        open_entries: dict[int, Resource] = {}
        for line in self.path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by SIGKILL mid-write: the resource was not created yet
            if "add" in record:
                fields = dict(record["add"])
                ident = int(fields.pop("id"))
                kind = str(fields.pop("kind"))
                target = str(fields.pop("target"))
                open_entries[ident] = Resource(ident, kind, target, fields)
            elif "update" in record:
                fields = dict(record["update"])
                resource = open_entries.get(int(fields.pop("id")))
                if resource:
                    resource.info.update(fields)
            elif "done" in record:
                open_entries.pop(int(record["done"]), None)
        return sorted(open_entries.values(), key=lambda r: r.ident)

    def reset_if_clean(self) -> None:
        if not self.pending() and self.path.exists():
            self.path.unlink()


# ---- removing resources ---------------------------------------------------------------------


def unmount_path(target: str, *, hurry: bool = False) -> bool:
    """Unmount target if mounted; returns True if something was unmounted."""
    if not mounts.is_mount_point(target):
        return False
    if hurry:
        mounts.unmount(target, lazy=True)
        return True
    for attempt in range(10):
        try:
            mounts.unmount(target)
            return True
        except SetupError:
            # Busy right after a child exits (a daemon still closing files): wait, then lazy.
            time.sleep(0.05 * (attempt + 1))
    mounts.unmount(target, lazy=True)
    return True


def stop_process(pid: int, start_time: str | None, *, hurry: bool = False) -> bool:
    """Stop pid if it is still the process we started (its start time matches)."""
    if start_time is not None and _process_start_time(pid) != start_time:
        return False
    if _process_start_time(pid) is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL if hurry else signal.SIGTERM)
    deadline = time.monotonic() + (0.5 if hurry else 5.0)
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if _process_start_time(pid) is None:
            return True
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    return True


def stop_process_group(pgid: int, start_time: str | None) -> bool:
    """Kill every process of a group we started (a timed child and what it forked)."""
    leader_start = _process_start_time(pgid)
    if leader_start is not None and start_time is not None and leader_start != start_time:
        return False  # the id was reused by another process: not ours
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                members.append(int(entry.name))
    for pid in members:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return bool(members)


def remove_path(target: str, root: Path) -> bool:
    path = Path(target)
    if not str(path).startswith(str(root) + "/"):
        raise UserError(f"journal names {target}, which is outside the scratch root {root}")
    if not path.exists() and not path.is_symlink():
        return False
    if mounts.mounts_under(path):
        raise SetupError(f"{path} still has mounts under it; not deleting")
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    return True


# ---- the scratch root itself ---------------------------------------------------------------


class Scratch:
    """An opened scratch root: holds the lock while a run or clean uses it."""

    def __init__(self, root: Path) -> None:
        self.root = check_root(root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / MARKER).touch()
        self.journal = Journal(self.root / "journal.jsonl")
        self.hurry = False  # set by a second Ctrl-C: lazy unmounts, SIGKILL
        self._lock_handle: object | None = None
        self._dir_idents: dict[str, int] = {}

    # -- lock
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
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} ({what})\n")
        handle.flush()
        self._lock_handle = handle

    def describe_holder(self, what: str) -> None:
        """Say more about the holder once known (the experiment id)."""
        handle = self._lock_handle
        if handle is not None:
            handle.seek(0)  # type: ignore[attr-defined]
            handle.truncate()  # type: ignore[attr-defined]
            handle.write(f"pid {os.getpid()} ({what})\n")  # type: ignore[attr-defined]
            handle.flush()  # type: ignore[attr-defined]

    def tidy(self) -> None:
        """After a clean finish: an empty journal and no empty trial directory remain."""
        self.journal.reset_if_clean()
        with contextlib.suppress(OSError):
            (self.root / "trials").rmdir()

    def unlock(self) -> None:
        if self._lock_handle is not None:
            self._lock_handle.close()  # type: ignore[attr-defined]
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
    def directory(self, *parts: str) -> Iterator[Path]:
        path = self.new_dir(*parts)
        try:
            yield path
        finally:
            remove_path(str(path), self.root)
            self.journal.done(self._dir_idents.pop(str(path)))

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
    ) -> Iterator[Path]:
        """Mount inside the scratch root; unmount on the way out, whatever happens."""
        if not str(target).startswith(str(self.root) + "/"):
            raise UserError(f"refusing to mount over {target}: it is outside the scratch root")
        ident = self.journal.add("mount", target)
        try:
            mounts.mount(source, target, fstype=fstype, options=options, bind=bind)
            if readonly_bind:
                mounts.remount_readonly_bind(target)
            yield target
        finally:
            unmount_path(str(target), hurry=self.hurry)
            failpoints.reached("teardown")
            self.journal.done(ident)

    @contextlib.contextmanager
    def process(self, start: Callable[[], int], label: str, *, named: Path) -> Iterator[int]:
        """A helper daemon: start() returns its pid; it is stopped on the way out.

        named is a path in this root that the daemon's command line carries: a kill between
        the start and the pid reaching the journal still leaves clean a way to find it."""
        if not named.is_relative_to(self.root):
            raise SetupError(f"a helper process must name a path in {self.root}, not {named}")
        ident = self.journal.add("process", label, named=str(named))
        pid = start()
        failpoints.reached("helper-started")  # started, its pid not yet journaled
        self.journal.update(ident, pid=pid, start_time=_process_start_time(pid))
        try:
            yield pid
        finally:
            stop_process(pid, None, hurry=self.hurry)
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
        found = []
        for name in sorted(os.listdir("/sys/block")):
            backing = mounts.loop_backing_file(name) if name.startswith("loop") else None
            if backing and backing.removesuffix(" (deleted)").startswith(str(self.root) + "/"):
                found.append((name, backing))
        return found

    def _detach_loop_devices(self) -> list[str]:
        # A killed run's namespace is torn down asynchronously: give the kernel a moment
        # to drop its mounts and autoclear their loop devices before detaching by hand.
        deadline = time.monotonic() + 5
        while self.loop_devices() and time.monotonic() < deadline:
            time.sleep(0.1)
        removed = []
        for name, backing in self.loop_devices():
            if not any(e.source == f"/dev/{name}" for e in mounts.mount_table()):
                with contextlib.suppress(SetupError):
                    system.run(["losetup", "--detach", f"/dev/{name}"])
                    removed.append(f"detached /dev/{name} ({backing})")
        return removed

    def _processes_naming(self, named: object) -> list[int]:
        """Processes whose command line carries named, a path in this root."""
        if not isinstance(named, str) or not Path(named).is_relative_to(self.root):
            return []
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(named.encode() in arg for arg in argv):
                found.append(int(proc.name))
        return found

    def clean(self) -> list[str]:
        """Remove what an earlier, crashed run left: newest first. Returns what was removed."""
        removed: list[str] = []
        pending = self.journal.pending()
        # Daemons first: a FUSE daemon keeps a dead run's mount namespace alive.
        ordered = [r for r in reversed(pending) if r.kind in ("group", "process")] + [
            r for r in reversed(pending) if r.kind not in ("group", "process")
        ]
        for resource in ordered:
            if resource.kind == "group":
                pgid = resource.info.get("pgid")
                if isinstance(pgid, int) and stop_process_group(
                    pgid,
                    resource.info.get("start_time"),  # type: ignore[arg-type]
                ):
                    removed.append(f"killed {resource.target} (process group {pgid})")
            elif resource.kind == "process":
                pid = resource.info.get("pid")
                # Killed before its pid was journaled: find it by the path it names.
                pids = [pid] if isinstance(pid, int) else self._processes_naming(resource.info.get("named"))
                for pid in pids:
                    if stop_process(pid, resource.info.get("start_time"), hurry=True):  # type: ignore[arg-type]
                        removed.append(f"stopped {resource.target} (pid {pid})")
            elif resource.kind == "mount":
                if unmount_path(resource.target):
                    removed.append(f"unmounted {resource.target}")
            elif resource.kind == "cgroup":
                if cgroups.remove(Path(resource.target)):
                    removed.append(f"removed control group {resource.target}")
            elif resource.kind == "path":
                removed += self._detach_loop_devices()
                if remove_path(resource.target, self.root):
                    removed.append(f"deleted {resource.target}")
            self.journal.done(resource.ident)
        self.tidy()
        return removed
