"""The kernel's view of mounts and block devices: /proc/self/mountinfo, /sys/block."""

import os
import time
from dataclasses import dataclass
from pathlib import Path

from layerbench.linux import system


@dataclass(frozen=True)
class MountEntry:
    mount_point: str
    fstype: str
    source: str
    options: str  # per-mount options, then the superblock options
    major_minor: str

    def line(self) -> str:
        """The mount line as `mount` prints it."""
        return f"{self.source} on {self.mount_point} type {self.fstype} ({self.options})"


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_table(mountinfo: str = "/proc/self/mountinfo") -> list[MountEntry]:
    entries = []
    for raw in Path(mountinfo).read_text().splitlines():
        left, _, right = raw.partition(" - ")
        fields = left.split()
        fstype, source, super_options = [*right.split(" ", 2), "", ""][:3]
        entries.append(
            MountEntry(
                mount_point=_unescape(fields[4]),
                fstype=fstype,
                source=_unescape(source),
                options=",".join(part for part in (fields[5], super_options) if part),
                major_minor=fields[2],
            )
        )
    return entries


def mount_of(path: str | os.PathLike[str]) -> MountEntry:
    """The mount that holds path (the last, i.e. topmost, with the longest prefix)."""
    target = os.path.realpath(path)
    best: MountEntry | None = None
    for entry in mount_table():
        point = entry.mount_point
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.mount_point)):
            best = entry
    assert best is not None, "/ is always mounted"
    return best


def mounts_under(root: str | os.PathLike[str]) -> list[MountEntry]:
    prefix = os.path.realpath(root).rstrip("/") + "/"
    return [e for e in mount_table() if (e.mount_point + "/").startswith(prefix)]


def is_mount_point(path: str | os.PathLike[str]) -> bool:
    target = os.path.realpath(path)
    return any(e.mount_point == target for e in mount_table())


def mount(
    source: str,
    target: str | os.PathLike[str],
    *,
    fstype: str | None = None,
    options: list[str] | None = None,
    bind: bool = False,
    via: list[str] | None = None,
) -> None:
    """via: a command prefix the mount runs under (nsenter into a network namespace)."""
    argv = [*(via or []), "mount"]
    if bind:
        argv.append("--bind")
    if fstype:
        argv += ["-t", fstype]
    if options:
        argv += ["-o", ",".join(options)]
    argv += [source, str(target)]
    system.run(argv)


def remount_readonly_bind(target: str | os.PathLike[str]) -> None:
    # A bind mount only becomes read-only through a second, remounting call.
    system.run(["mount", "-o", "remount,bind,ro", str(target)])


def unmount(target: str | os.PathLike[str], *, lazy: bool = False) -> None:
    argv = ["umount"]
    if lazy:
        argv.append("--lazy")
    system.run([*argv, str(target)])


# ---- block devices -------------------------------------------------------------------


def device_name(major_minor: str) -> str | None:
    """The kernel name of a block device (vda, loop3, vda1) or None for a virtual fs."""
    link = Path("/sys/dev/block") / major_minor
    if not link.exists():
        return None
    return link.resolve().name


def whole_disk(name: str) -> str:
    """vda1 -> vda; a whole disk maps to itself."""
    sys_path = Path("/sys/class/block") / name
    if (sys_path / "partition").exists():
        return sys_path.resolve().parent.name
    return name


def loop_backing_file(name: str) -> str | None:
    backing = Path("/sys/block") / name / "loop" / "backing_file"
    try:
        return backing.read_text().strip()
    except OSError:
        return None


def wait_loop_released(name: str, backing: Path, timeout: float = 10.0) -> bool:
    """Wait until loop device name no longer serves backing: a loop device mounted with
    -o loop detaches itself once unmounted, but the kernel does it in the background, which
    takes seconds while the disk is busy. True once released (or bound to another file)."""
    deadline = time.monotonic() + timeout
    while (found := loop_backing_file(name)) and found.removesuffix(" (deleted)") == str(backing):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def devices_under(path: str | os.PathLike[str], _depth: int = 0) -> list[str]:
    """Every block device whose I/O serves files at path: the fs's device, and for a
    loop device the devices under its backing file, for a device-mapper or md device the
    devices it is made of (its slaves), and for overlayfs those under its upper and lower
    dirs. Ordered top first, without duplicates."""
    if _depth > 8:
        return []
    entry = mount_of(path)
    found: list[str] = []
    name = device_name(entry.major_minor)
    if name is None and entry.source.startswith("/dev/"):
        name = os.path.basename(os.path.realpath(entry.source))
    if name and Path("/sys/class/block", name).exists():
        found += _device_and_below(name, _depth)
    elif entry.fstype == "overlay":
        for option in entry.options.split(","):
            key, _, value = option.partition("=")
            if key in ("upperdir", "lowerdir") and value:
                for directory in value.split(":"):
                    found += devices_under(directory, _depth + 1)
    return list(dict.fromkeys(found))


def _device_and_below(name: str, depth: int) -> list[str]:
    found = [name]
    slaves = sorted(path.name for path in Path("/sys/class/block", name, "slaves").glob("*"))
    if name.startswith("loop"):
        backing = loop_backing_file(name)
        if backing:
            found += devices_under(os.path.dirname(backing), depth + 1)
    elif slaves and depth < 8:
        for slave in slaves:
            found += _device_and_below(slave, depth + 1)
    elif whole_disk(name) != name:
        found.append(whole_disk(name))
    return found


def has_journal(source: str) -> bool | None:
    """ext4's journal (None: not ext4, or the kernel does not say)."""
    try:
        task = (Path("/sys/fs/ext4") / Path(source).name / "journal_task").read_text().strip()
    except OSError:
        return None
    return task != "<none>"


def filesystem_of(path: str | os.PathLike[str]) -> tuple[str, str, str]:
    """(fstype, source, options) of the mount holding path."""
    entry = mount_of(path)
    return entry.fstype, entry.source, entry.options
