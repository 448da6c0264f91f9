"""Every reader of /proc (and the /sys block statistics) in one leaf module: processes,
their stat, command line and directories; the kernel's file systems; block device and
CPU counters; memory. Nothing here imports the rest of layerbench."""

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ---- processes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PidStat:
    """The fields of /proc/PID/stat that layerbench reads."""

    pid: int
    comm: str
    state: str  # R, S, D, Z, T ...
    ppid: int
    pgrp: int
    utime_s: float
    stime_s: float
    start_time: str  # clock ticks since boot, as text: with the pid, names one process

    @property
    def cpu_s(self) -> float:
        return self.utime_s + self.stime_s


def pids() -> Iterator[int]:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            yield int(entry.name)


def pid_stat(pid: int | str, task: int | None = None) -> PidStat | None:
    """The process's stat (or one of its threads'), None once it is gone."""
    path = f"/proc/{pid}/task/{task}/stat" if task is not None else f"/proc/{pid}/stat"
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    # comm may hold spaces and parentheses: it ends at the last ')'.
    head, _, tail = text.rpartition(")")
    fields = tail.split()
    return PidStat(
        pid=int(pid),
        comm=head.partition("(")[2],
        state=fields[0],
        ppid=int(fields[1]),
        pgrp=int(fields[2]),
        utime_s=int(fields[11]) / CLOCK_TICKS,
        stime_s=int(fields[12]) / CLOCK_TICKS,
        start_time=fields[19],
    )


def start_time(pid: int) -> str | None:
    stat = pid_stat(pid)
    return stat.start_time if stat else None


def alive(pid: int) -> bool:
    """Running or sleeping, not gone and not a zombie (a zombie does nothing more)."""
    stat = pid_stat(pid)
    return stat is not None and stat.state not in ("Z", "X")


def cmdline(pid: int) -> list[bytes]:
    """The process's argv; [] for a kernel thread or a process that is gone.

    A process in the middle of execve(2) shows an empty command line for a moment: its
    close-on-exec descriptors (which tell a parent the exec succeeded) close before the
    new arguments are in place. Wait that moment out rather than miss the process."""
    for _ in range(50):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return []
        if raw or _kernel_thread(pid) or not alive(pid):
            return raw.split(b"\0") if raw else []
        time.sleep(0.002)
    return []


def _kernel_thread(pid: int) -> bool:
    stat = pid_stat(pid)
    return stat is None or stat.ppid == 2 or pid == 2


def link(pid: int, name: str) -> str | None:
    """cwd or root of a process, as a path; None if unreadable or gone."""
    try:
        return os.readlink(f"/proc/{pid}/{name}")
    except OSError:
        return None


def ancestors(pid: int) -> set[int]:
    """pid and every process above it, up to init."""
    found = set()
    while pid > 0 and pid not in found:
        found.add(pid)
        stat = pid_stat(pid)
        if stat is None:
            break
        pid = stat.ppid
    return found


def children(pid: int) -> list[int]:
    """The live children of a process's main thread (its task's `children` file), [] if gone."""
    try:
        return [int(found) for found in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def descendants(pid: int) -> list[int]:
    """Every live process below pid (children, their children...), parents first."""
    children: dict[int, list[int]] = {}
    for other in pids():
        if (stat := pid_stat(other)) and stat.state != "Z":
            children.setdefault(stat.ppid, []).append(other)
    found: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        found.append(child)
        todo += children.get(child, [])
    return found


def group_members(pgid: int) -> list[int]:
    return [pid for pid in pids() if (stat := pid_stat(pid)) and stat.pgrp == pgid and stat.state != "Z"]


# ---- the kernel ------------------------------------------------------------------------------


def filesystems() -> set[str]:
    """File system types the kernel has now (registered, loaded or built in)."""
    try:
        text = Path("/proc/filesystems").read_text()
    except OSError:
        return set()
    return {line.split()[-1] for line in text.splitlines() if line.strip()}


def _has_module(name: str) -> bool:
    """A kernel module named name is loaded, built in, or installed (the kernel loads it on
    first use)."""
    release = os.uname().release
    modules = ""
    for listing in ("modules.dep", "modules.builtin"):
        try:
            modules += Path(f"/lib/modules/{release}/{listing}").read_text()
        except OSError:
            continue
    return f"/{name}.ko" in modules or Path(f"/sys/module/{name}").is_dir()


def kernel_has_module(name: str) -> bool:
    """The kernel has the module name (as /sys/module spells it, dm_crypt): loaded, built in,
    or installed, whichever of - and _ its file is named with."""
    return (
        any(_has_module(spelled) for spelled in {name, name.replace("_", "-")})
        or Path(f"/sys/module/{name.replace('-', '_')}").is_dir()
    )


def kernel_has_filesystem(fs: str) -> bool:
    """The kernel can mount fs: registered now, or a module not loaded yet (those mount fine)."""
    return fs in filesystems() or _has_module(fs)


def loop_schedulers() -> list[str] | None:
    """The I/O schedulers a loop device's queue offers now, as its queue/scheduler lists
    them; None when no loop device is there to ask."""
    for queue in sorted(Path("/sys/block").glob("loop*/queue/scheduler")):
        try:
            return queue.read_text().replace("[", "").replace("]", "").split()
        except OSError:
            continue
    return None


def kernel_has_scheduler(name: str) -> bool:
    """A loop device can take this I/O scheduler: offered now, or a module the kernel loads
    when it is asked for (bfq is often one); True when there is no loop device to ask."""
    offered = loop_schedulers()
    return offered is None or name in offered or _has_module(name) or _has_module(f"{name}-iosched")


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes."""
    found = {}
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            found[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return found


def available_memory() -> int | None:
    return meminfo().get("MemAvailable")


# ---- counters ------------------------------------------------------------------------------

_SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's block size
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class DiskCounters:
    read_ios: int = 0
    read_bytes: int = 0
    write_ios: int = 0
    write_bytes: int = 0
    read_ms: int = 0  # time reads waited, summed over requests
    write_ms: int = 0
    busy_ms: int = 0  # io_ticks: time with at least one request in flight (utilisation)
    queue_ms: int = 0  # weighted time in queue (requests x ms)
    in_flight: int = 0  # a level, not a counter


_DELTA_KEYS = (
    "read_ios",
    "read_bytes",
    "write_ios",
    "write_bytes",
    "read_ms",
    "write_ms",
    "busy_ms",
    "queue_ms",
)


def read_diskstats(names: list[str]) -> dict[str, DiskCounters]:
    """Cumulative I/O counters of the named block devices (vda, loop3 ...), in the order
    asked for."""
    wanted = set(names)
    found: dict[str, DiskCounters] = {}
    with open("/proc/diskstats") as handle:
        for line in handle:
            fields = line.split()
            if fields[2] in wanted:
                found[fields[2]] = DiskCounters(
                    read_ios=int(fields[3]),
                    read_bytes=int(fields[5]) * _SECTOR,
                    write_ios=int(fields[7]),
                    write_bytes=int(fields[9]) * _SECTOR,
                    read_ms=int(fields[6]),
                    write_ms=int(fields[10]),
                    in_flight=int(fields[11]),
                    busy_ms=int(fields[12]),
                    queue_ms=int(fields[13]),
                )
    return {name: found[name] for name in names if name in found}


def disk_deltas(
    before: dict[str, DiskCounters], after: dict[str, DiskCounters], prefix: str = ""
) -> dict[str, dict[str, int]]:
    """What each device did between two readings, keyed prefix + name."""
    return {
        prefix + name: {key: getattr(after[name], key) - getattr(before[name], key) for key in _DELTA_KEYS}
        for name in before
        if name in after
    }


def dirty_bytes() -> int:
    """Dirty and under-writeback page cache of the whole host (nr_dirty + nr_writeback)."""
    text = Path("/proc/vmstat").read_text()
    total = 0
    for key in ("\nnr_dirty ", "\nnr_writeback "):
        at = text.find(key)
        if at >= 0:
            total += int(text[at + len(key) : text.index("\n", at + 1)])
    return total * PAGE


def read_cpu() -> tuple[int, int, int]:
    """(total, idle, iowait) jiffies of all CPUs from the first line of /proc/stat."""
    with open("/proc/stat") as handle:
        fields = [int(v) for v in handle.readline().split()[1:9]]
    # user nice system idle iowait irq softirq steal (guest time is inside user already)
    return sum(fields), fields[3], fields[4]


def cpu_seconds_with_children(pid: int) -> float:
    """user + sys of a live process and its reaped children (stat fields 14-17), 0 if gone.
    In clock ticks (10 ms): for a few milliseconds of work use cpu_ns."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / CLOCK_TICKS


def cpu_ns(pid: int) -> int:
    """CPU time of a live process's threads in nanoseconds (schedstat's time on the CPU,
    summed over /proc/PID/task), 0 if gone. A thread that has exited is no longer counted:
    for a daemon whose threads come and go, read its control group (group_cpu_ns)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as handle:
                total += int(handle.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread exited while we looked
    return total


def group_cpu_ns(group: Path) -> int | None:
    """CPU time of everything that ever ran in a cgroup v2 group, exited threads and
    children included (cpu.stat usage_usec, kept by the kernel without any controller)."""
    try:
        for line in (group / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) * 1000
    except (OSError, ValueError):
        return None
    return None


def process_state(pid: int) -> str | None:
    """R, S, D, Z ... of a process, None once it is gone."""
    stat = pid_stat(pid)
    return stat.state if stat else None


def process_faults(pid: int) -> tuple[int, int]:
    """(minor, major) page faults of a live process so far (stat fields 10 and 12)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0, 0
    return int(fields[7]), int(fields[9])


def context_switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of a live process so far."""
    found = {"voluntary_ctxt_switches": 0, "nonvoluntary_ctxt_switches": 0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in found:
                found[key] = int(value)
    except OSError:
        pass
    return found["voluntary_ctxt_switches"], found["nonvoluntary_ctxt_switches"]
