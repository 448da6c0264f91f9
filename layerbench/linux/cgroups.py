"""Control groups: where the kernel's blkio (cgroup v1) or io (cgroup v2) controller lives,
the v2 tree that gives a run its own pressure stall time, and creating, limiting and
removing our groups.

Every group layerbench makes sits under one parent named `layerbench` and is named after
the scratch root that owns it (slashes become '%'), so a check can tell whose it is and
`clean` can find it again. Removing a group first kills what is still inside it: only
the workloads of our own runs are ever put there.
"""

import contextlib
import errno
import hashlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from layerbench.core.errors import SetupError

PARENT = "layerbench"
_MAX_NAME = 240  # NAME_MAX is 255; leave room for nothing else


@dataclass(frozen=True)
class Hierarchy:
    """A mounted cgroup tree that can throttle block I/O."""

    version: int  # 1: blkio controller, 2: unified tree with the io controller
    mount_point: Path
    io: bool = True  # False: a v2 tree used only for a group's pressure files (no controller)

    @property
    def parent(self) -> Path:
        return self.mount_point / PARENT


def _cgroup_mounts() -> list[tuple[str, Path, str]]:
    """(fstype, mount point, super options) of every cgroup mount this process sees."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype, _source, options = [*right.split(" ", 2), "", ""][:3]
        if fstype in ("cgroup", "cgroup2"):
            found.append((fstype, Path(left.split()[4]), options))
    return found


def mounted_trees() -> list[tuple[str, Path, str]]:
    """(fstype, mount point, super options) of every cgroup tree: for a layer that needs
    another controller (limits: cpuset, memory)."""
    return _cgroup_mounts()


def io_hierarchy() -> Hierarchy | None:
    """The tree to throttle in: cgroup v2 when its io controller is there, else v1 blkio."""
    mounts = _cgroup_mounts()
    for fstype, point, _ in mounts:
        if fstype == "cgroup2":
            with contextlib.suppress(OSError):
                if "io" in (point / "cgroup.controllers").read_text().split():
                    return Hierarchy(2, point)
    for fstype, point, options in mounts:
        if fstype == "cgroup" and "blkio" in options.split(","):
            return Hierarchy(1, point)
    return None


def pressure_hierarchy() -> Hierarchy | None:
    """A cgroup v2 tree where a group of our own reports its own pressure stall time
    (io.pressure, cpu.pressure, memory.pressure need no controller), when PSI is on."""
    if not Path("/proc/pressure/io").exists():
        return None
    for fstype, point, _ in _cgroup_mounts():
        if fstype == "cgroup2" and (point / "cgroup.procs").exists():
            return Hierarchy(2, point, io=False)
    return None


def group_name(scratch_root: Path, label: str) -> str:
    """The group's name: the owning scratch root, slashes as '%', then the label."""
    name = f"{str(scratch_root).strip('/').replace('/', '%')}%{label}"
    if len(name) > _MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        name = f"{name[: _MAX_NAME - 17]}~{digest}"
    return name


def groups_of(scratch_root: Path) -> list[Path]:
    """Our groups whose scratch root is scratch_root or lies under it, in every tree."""
    prefix = str(scratch_root).strip("/").replace("/", "%") + "%"
    found = []
    for _, point, _ in _cgroup_mounts():
        parent = point / PARENT
        with contextlib.suppress(OSError):
            found += [child for child in parent.iterdir() if child.is_dir() and child.name.startswith(prefix)]
    return sorted(set(found))


def _check_ours(path: Path) -> None:
    if path.parent.name != PARENT or not any(path.parent.parent == p for _, p, _ in _cgroup_mounts()):
        raise SetupError(f"{path} is not a layerbench control group; not touching it")


def _enable_io_below(directory: Path) -> None:
    """cgroup v2 hands a controller to children only when the parent delegates it."""
    control = directory / "cgroup.subtree_control"
    if "io" not in control.read_text().split():
        control.write_text("+io\n")


def create(hierarchy: Hierarchy, name: str) -> Path:
    """Make the group (and the shared parent when missing); returns its directory."""
    path = hierarchy.parent / name
    for _ in range(3):
        try:
            if hierarchy.version == 2 and hierarchy.io:
                _enable_io_below(hierarchy.mount_point)
            hierarchy.parent.mkdir(exist_ok=True)
            if hierarchy.version == 2 and hierarchy.io:
                _enable_io_below(hierarchy.parent)
            path.mkdir()
            return path
        except FileNotFoundError:
            continue  # another run removed the empty parent just now: make it again
        except OSError as exc:
            raise SetupError(f"cannot create control group {path}: {exc.strerror}") from None
    raise SetupError(f"cannot create control group {path}: its parent keeps vanishing")


def limit(path: Path, version: int, device: str, limits: dict[str, int]) -> list[str]:
    """Set limits ({"read_bps": n, "write_bps": n, "read_iops": n, "write_iops": n}) on one
    block device ("MAJ:MIN"); returns the settings as written, for the record."""
    written = []
    try:
        if version == 1:
            for key, value in limits.items():
                file = path / f"blkio.throttle.{key}_device"
                file.write_text(f"{device} {value}\n")
                written.append(f"{file.name}: {device} {value}")
        else:
            v2_keys = {"read_bps": "rbps", "write_bps": "wbps", "read_iops": "riops", "write_iops": "wiops"}
            line = " ".join([device, *(f"{v2_keys[k]}={v}" for k, v in limits.items())])
            (path / "io.max").write_text(line + "\n")
            written.append(f"io.max: {line}")
    except OSError as exc:
        raise SetupError(f"cannot limit {device} in {path}: {exc.strerror}") from None
    return written


def _home(procs: Path) -> Path:
    """The group this process is in now, in the tree that holds the cgroup.procs file."""
    for fstype, point, options in _cgroup_mounts():
        if point in procs.parents:
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                number, controllers, group = line.split(":", 2)
                v2 = fstype == "cgroup2" and number == "0" and not controllers
                names = set(controllers.split(","))
                if v2 or (fstype == "cgroup" and controllers and names <= set(options.split(","))):
                    return point / group.lstrip("/") / "cgroup.procs"
    raise SetupError(f"{procs} is in no cgroup tree this process is in")


def place_all(pids: list[int], procs: Path) -> None:
    """Move processes into one group; one that has exited meanwhile is skipped."""
    for pid in pids:
        try:
            procs.write_text(f"{pid}\n")
        except ProcessLookupError:
            continue
        except OSError as exc:
            raise SetupError(f"cannot move process {pid} into {procs.parent}: {exc.strerror}") from None


def remove(path: Path, *, timeout: float = 5.0) -> bool:
    """Kill whatever is still inside the group, then remove it (and the parent when it is
    empty). Returns True if the group existed."""
    if not path.exists():
        return False
    _check_ours(path)
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):
            for pid in (path / "cgroup.procs").read_text().split():
                if int(pid) == os.getpid():
                    _home(path / "cgroup.procs").write_text(f"{os.getpid()}\n")
                    continue  # never kill ourselves: step out instead
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        try:
            path.rmdir()
            break
        except FileNotFoundError:
            break
        except OSError as exc:
            # EBUSY while a killed process is still exiting: wait for it.
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise SetupError(f"cannot remove control group {path}: {exc.strerror}") from None
            time.sleep(0.02)
    with contextlib.suppress(OSError):
        path.parent.rmdir()  # only succeeds when no other run has a group there
    return True
