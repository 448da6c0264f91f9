"""What the kernel saw during a timed run, beyond the workload's own rusage: pressure stall
time (PSI), memory and writeback (/proc/vmstat), the host's CPU split (/proc/stat) and the
CPU time of kernel threads (loop workers, jbd2, kworkers, writeback flushers).

Two snapshots, one right before the child starts and one right after it is reaped, outside
the timed region; `delta` turns them into `KernelCounters`. What is system-wide says so in
its name or docstring: on a shared host it includes other work. The run's own pressure
comes from a cgroup v2 group that holds only the timed child (see executors.local), where
the host has one.
"""

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerbench.core.facts import Fact, declare
from layerbench.observe.observer import Capture

MEM_FREE_KIB_BEFORE_RUN = Fact(
    "mem_free_kib_before_run", "before", "free memory (KiB) right before the run", int
)
MEMORY_REPORTED_KIB_BEFORE_RUN = Fact(
    "memory_reported_kib_before_run",
    "before",
    "free memory (KiB) handed back to the hypervisor since the last run ended (free page reporting)",
    int,
)
MEMORY_REPORTED_KIB_DURING_RUN = Fact(
    "memory_reported_kib_during_run",
    "during",
    "free memory (KiB) handed back to the hypervisor during the run",
    int,
)
declare(MEM_FREE_KIB_BEFORE_RUN, MEMORY_REPORTED_KIB_BEFORE_RUN, MEMORY_REPORTED_KIB_DURING_RUN)

PSI_RESOURCES = ("io", "cpu", "memory")
VMSTAT_KEYS = (
    "pgpgin",  # KiB read in from block devices
    "pgpgout",  # KiB written out
    "nr_dirtied",  # pages dirtied
    "nr_written",  # pages written back
    "pgmajfault",
    "workingset_refault_file",  # file pages read again soon after they were evicted
)
_TICK = os.sysconf("SC_CLK_TCK")
# Kernel threads that spent less than this during a run are not named in the report.
_NAMED_THREAD_S = 0.005


def read_psi(directory: Path = Path("/proc/pressure")) -> dict[str, float]:
    """{"io_some": s, "io_full": s, "cpu_some": s, ...}: total stall seconds since boot (or
    since the cgroup was made), from the `total=` microseconds of each line. A file that is
    not there (PSI off, or a cgroup without it) gives no keys."""
    found: dict[str, float] = {}
    for resource in PSI_RESOURCES:
        name = directory / (f"{resource}.pressure" if directory.name != "pressure" else resource)
        try:
            text = name.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            kind, _, rest = line.partition(" ")
            for item in rest.split():
                if item.startswith("total="):
                    found[f"{resource}_{kind}"] = int(item[6:]) / 1e6
    return found


def read_vmstat() -> dict[str, int]:
    found: dict[str, int] = {}
    with open("/proc/vmstat") as handle:
        for line in handle:
            key, _, value = line.partition(" ")
            if key in VMSTAT_KEYS or key in ("nr_dirty", "nr_writeback"):
                found[key] = int(value)
    return found


_REPORTED = Path("/sys/module/page_reporting/parameters/reported_kib")


def read_reported_kib() -> int | None:
    """KiB of free memory the guest has handed back to its hypervisor so far (free page
    reporting, where the kernel counts it): memory that costs a host fault when next touched.
    None where the kernel does not count it."""
    try:
        return int(_REPORTED.read_text())
    except (OSError, ValueError):
        return None


def read_mem_free_kib() -> int | None:
    with contextlib.suppress(OSError, ValueError, StopIteration), open("/proc/meminfo") as handle:
        return int(next(line for line in handle if line.startswith("MemFree:")).split()[1])
    return None


@dataclass(frozen=True)
class CpuSplit:
    """Jiffies of all CPUs from /proc/stat's first line."""

    busy: int
    iowait: int
    steal: int
    total: int

    @classmethod
    def read(cls) -> "CpuSplit":
        with open("/proc/stat") as handle:
            values = [int(v) for v in handle.readline().split()[1:9]]
        user, nice, system, _idle, iowait, irq, softirq, steal = values
        return cls(user + nice + system + irq + softirq, iowait, steal, sum(values))


def _thread_cpu_s(pid: str) -> float | None:
    """CPU time of one task in seconds: /proc/PID/schedstat's nanoseconds on a CPU, else
    utime + stime in clock ticks."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    return None


def kernel_threads() -> dict[str, tuple[str, float]]:
    """pid -> (name, CPU seconds) of every kernel thread (kthreadd's children)."""
    found: dict[str, tuple[str, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[1] != "2" and entry.name != "2":  # ppid 2: a kernel thread
            continue
        cpu = _thread_cpu_s(entry.name)
        if cpu is not None:
            found[entry.name] = (name, cpu)
    return found


@dataclass(frozen=True)
class Snapshot:
    psi: dict[str, float]
    group_psi: dict[str, float]
    vmstat: dict[str, int]
    cpu: CpuSplit
    threads: dict[str, tuple[str, float]]

    @classmethod
    def take(cls, group: Path | None = None) -> "Snapshot":
        return cls(
            read_psi(),
            read_psi(group) if group is not None else {},
            read_vmstat(),
            CpuSplit.read(),
            kernel_threads(),
        )


@dataclass
class KernelCounters:
    """The deltas of one run. None: not measured on this host."""

    psi_io_some_s: float | None = None  # the run's own where it has a group, else system-wide
    psi_io_full_s: float | None = None
    psi_cpu_some_s: float | None = None
    psi_memory_some_s: float | None = None
    psi_scope: str | None = None  # "run" (its cgroup) or "system"
    kthread_cpu_s: float | None = None  # system-wide: every kernel thread, ours and others'
    host_busy_pct: float | None = None  # system-wide, of all CPUs
    host_iowait_pct: float | None = None
    host_steal_pct: float | None = None
    vmstat: dict[str, int] = field(default_factory=dict)  # system-wide deltas
    system_psi: dict[str, float] = field(default_factory=dict)
    threads: dict[str, float] = field(default_factory=dict)  # name -> CPU s, those that moved


def _thread_family(name: str) -> str:
    """kworker/u8:3-flush-7:0 -> kworker (flush-7:0); loop3 -> loop3; jbd2/loop3-8 -> jbd2/loop3-8."""
    if name.startswith("kworker/"):
        _, _, work = name.partition("-")
        return f"kworker ({work})" if work else "kworker"
    return name


def delta(before: Snapshot, after: Snapshot) -> KernelCounters:
    system = {k: after.psi[k] - before.psi[k] for k in after.psi if k in before.psi}
    own = {k: after.group_psi[k] - before.group_psi[k] for k in after.group_psi if k in before.group_psi}
    psi, scope = (own, "run") if own else (system, "system" if system else None)
    threads: dict[str, float] = {}
    for pid, (name, cpu) in after.threads.items():
        earlier = before.threads.get(pid)
        # A thread that started during the run spent all its time in it. (A kworker's name
        # changes with the work it does: the pid is the thread, the last name its work.)
        spent = cpu - earlier[1] if earlier is not None else cpu
        if spent > 0:
            family = _thread_family(name)
            threads[family] = threads.get(family, 0.0) + spent
    cpu_total = after.cpu.total - before.cpu.total

    def share(field_name: str) -> float | None:
        if cpu_total <= 0:
            return None
        return 100.0 * (getattr(after.cpu, field_name) - getattr(before.cpu, field_name)) / cpu_total

    return KernelCounters(
        psi_io_some_s=psi.get("io_some"),
        psi_io_full_s=psi.get("io_full"),
        psi_cpu_some_s=psi.get("cpu_some"),
        psi_memory_some_s=psi.get("memory_some"),
        psi_scope=scope,
        kthread_cpu_s=sum(threads.values()) if after.threads else None,
        host_busy_pct=share("busy"),
        host_iowait_pct=share("iowait"),
        host_steal_pct=share("steal"),
        vmstat={k: after.vmstat[k] - before.vmstat[k] for k in VMSTAT_KEYS if k in after.vmstat},
        system_psi=system,
        threads={
            name: round(spent, 4)
            for name, spent in sorted(threads.items(), key=lambda item: -item[1])
            if spent >= _NAMED_THREAD_S
        },
    )


@dataclass
class _MemoryAround:
    """The free memory and the memory handed back to the hypervisor, around one run."""

    free_before: int | None
    reported_since_last: int | None
    reported_during: int | None = None

    def facts(self) -> dict[str, Any]:
        found = {
            MEM_FREE_KIB_BEFORE_RUN.key: self.free_before,
            MEMORY_REPORTED_KIB_BEFORE_RUN.key: self.reported_since_last,
            MEMORY_REPORTED_KIB_DURING_RUN.key: self.reported_during,
        }
        return {key: value for key, value in found.items() if value is not None}


class FreePageReporting:
    """An observer of every timed run of one executor. Right before the run (a pre-run
    covariate, not an outcome): the free memory, and how much free memory went back to the
    hypervisor since the last run ended (free page reporting): a run that dirties it again
    pays a host fault per page. Right after: how much went back during the run."""

    def __init__(self) -> None:
        self._at_last_run: int | None = None

    @contextlib.contextmanager
    def around(self) -> Iterator[Capture]:
        reported = read_reported_kib()
        since = None
        if reported is not None and self._at_last_run is not None:
            since = reported - self._at_last_run
        capture = _MemoryAround(read_mem_free_kib(), since)
        yield capture
        after = read_reported_kib()
        self._at_last_run = after
        if after is not None and reported is not None:
            capture.reported_during = after - reported
