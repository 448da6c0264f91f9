"""One run: a child process timed with a monotonic clock and measured with wait4, plus
the block devices', helper processes' and kernel's counters across the same interval."""

import contextlib
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from typing_extensions import TypedDict  # pydantic validates it before Python 3.12

from layerbench.core.facts import Fact, declare
from layerbench.core.runs import RunRecord
from layerbench.linux import cgroups, procfs
from layerbench.observe import kernelstats, noise, sampling


class KernelFigures(TypedDict, total=False):
    """What the kernel saw over a run that is not a registry metric (the `kernel` fact)."""

    psi_scope: str | None  # "run" (its cgroup) or "system"
    system_psi_s: dict[str, float]
    host_busy_pct: float | None
    host_iowait_pct: float | None
    host_steal_pct: float | None
    vmstat: dict[str, int]
    threads_cpu_s: dict[str, float]  # kernel thread -> CPU seconds, those that moved
    devices_top_first: list[str]


CPUS = Fact("cpus", "before", "the CPUs the timed run was pinned to", list[int])
HELPER_CPU_SOURCE = Fact(
    "helper_cpu_source",
    "before",
    "where the helpers' CPU time was read (their cgroup or their processes)",
    str,
)
KERNEL = Fact(
    "kernel",
    "during",
    "the kernel's figures over the run: PSI scope, host busy/iowait/steal, vmstat, threads' "
    "CPU, devices top first",
    KernelFigures,
)
declare(CPUS, HELPER_CPU_SOURCE, KERNEL)


def drop_caches() -> None:
    """Write back dirty data, then drop the page, dentry and inode caches (untimed)."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


@dataclass
class RunCounters:
    """What one run measured: the csh `time` set, device I/O and helper CPU."""

    status: str  # "ok" or "failed"
    error: str | None
    exit_code: int | None
    wall_s: float
    user_s: float
    sys_s: float
    cpu_pct: float
    maxrss_kb: int
    minflt: int
    majflt: int
    inblock: int
    oublock: int
    nvcsw: int
    nivcsw: int
    read_bytes: int
    write_bytes: int
    read_ios: int
    write_ios: int
    helper_cpu_s: float
    # From the kernel (kernelstats): None where this host does not have it, or the run was
    # measured elsewhere (a guest).
    psi_io_some_s: float | None = None
    psi_io_full_s: float | None = None
    psi_cpu_some_s: float | None = None
    psi_memory_some_s: float | None = None
    kthread_cpu_s: float | None = None
    vm_majfault: int | None = None
    vm_written_bytes: int | None = None
    dirty_peak_bytes: int | None = None
    # The bottom device of the stack (the disk behind a loop device).
    disk_write_bytes: int | None = None
    disk_busy_pct: float | None = None
    disk_wait_ms: float | None = None
    disk_in_flight_peak: int | None = None
    devices: dict[str, dict[str, int]] = field(default_factory=dict)
    samples: list[dict[str, float]] = field(default_factory=list)  # sampling.Sample rows
    sampler: dict[str, float] = field(default_factory=dict)  # the sampler's own cost
    facts: dict[str, object] = field(default_factory=dict)  # noise during the run

    def as_row(self) -> dict[str, object]:
        return asdict(self)


def _gnu_time() -> str | None:
    """GNU time, if installed: it forks the command from a small process, so the command's
    peak RSS is its own. A child forked straight from this Python process inherits the
    parent's memory high-water mark at exec and would report ~100 MB for `true`."""
    path = shutil.which("time")
    if path is None:
        return None
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return path if "GNU" in done.stdout + done.stderr else None


GNU_TIME = _gnu_time()


def _kill_tree(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def run_timed(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    devices: Sequence[str] = (),
    helper_pids: Sequence[int] = (),
    helper_group: Path | None = None,
    stderr_path: Path | None = None,
    on_start: Callable[[int], None] | None = None,
    on_running: Callable[[], None] | None = None,
    at_gate: Callable[[], None] | None = None,
    cgroups: Sequence[Path] = (),
    cpus: list[int] | None = None,
    pressure_group: Path | None = None,
    rss_dir: Path | None = None,
) -> RunCounters:
    """Run argv to completion and measure it: in its own process group, in the control groups
    (cgroup.procs files) and on the CPUs given before its first instruction (see _Gated); the
    clock holds the command alone. on_start(pid): the child's pid, for the journal, before the
    command runs; at_gate(): last before the clock (a guest waits there for the host's go);
    on_running(): once the command was let go. pressure_group: a cgroup v2 group among cgroups
    holding only the child (its own stall time). rss_dir: where GNU time's file goes (a
    trial's directory, which clean removes after a kill -9; default: the temp dir)."""
    full_env = {**os.environ, **(env or {})}
    program = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=full_env.get("PATH"))
    if program is None or not os.access(os.path.join(cwd, program), os.X_OK):
        return failed(f"cannot start {argv[0]}: no such program")
    with _rss_file(rss_dir) as rss_name, _stderr_to(stderr_path) as stderr_target:
        wrapper = [GNU_TIME, "--quiet", "-f", "%M", "-o", rss_name, "--"] if GNU_TIME else []  # see _Gated
        try:
            gated = _Gated.spawn(wrapper, list(argv), cwd=cwd, env=full_env, stderr=stderr_target)
        except OSError as exc:
            return failed(f"cannot start {argv[0]}: {exc.strerror}")
        with gated:
            gated.place(list(cgroups), cpus)
            if on_start is not None:
                on_start(gated.pid)
            before = _Before.take(devices, _Helpers(list(helper_pids), helper_group), pressure_group)
            gate_cost = gated.cost_so_far()
            if at_gate is not None:
                at_gate()
            with sampling.Sampler(list(devices)) as sampler:
                start = time.monotonic()
                gated.release()
                if on_running is not None:
                    on_running()
                error, status, usage = _wait(gated.child, timeout)
                wall = time.monotonic() - start
            disks_after = procfs.read_diskstats(list(devices))
            usage = gate_cost.taken_from(usage)
        maxrss_kb = _read_rss(rss_name)
    exit_code = os.waitstatus_to_exitcode(status)
    if error is None and exit_code != 0:
        error = _describe_exit(exit_code, stderr_path)
    kernel_after = kernelstats.Snapshot.take(pressure_group)
    return _counters(
        before, devices, disks_after, usage, wall, maxrss_kb, exit_code, error, sampler, cpus, kernel_after
    )


@contextlib.contextmanager
def _rss_file(directory: Path | None) -> Iterator[str]:
    """Where GNU time writes the child's peak RSS."""
    fd, name = tempfile.mkstemp(prefix="layerbench-rss-", dir=directory)
    os.close(fd)
    try:
        yield name
    finally:
        os.unlink(name)


@contextlib.contextmanager
def _stderr_to(path: Path | None) -> Iterator[Any]:
    if path is None:
        yield subprocess.DEVNULL
        return
    with open(path, "wb") as handle:
        yield handle


def _wait(child: subprocess.Popen[bytes], timeout: float | None) -> tuple[str | None, int, Any]:
    """Wait for the child (killing its group at the timeout); (error, wait status, rusage)."""
    error = None
    try:
        pidfd = os.pidfd_open(child.pid)
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            if not poller.poll(None if timeout is None else int(timeout * 1000)):
                _kill_tree(child.pid)
                error = f"timed out after {timeout:g}s and was killed"
        finally:
            os.close(pidfd)
        _, status, usage = os.wait4(child.pid, 0)
    except BaseException:
        _kill_tree(child.pid)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child.pid, 0)
        raise
    child.returncode = os.waitstatus_to_exitcode(status)
    return error, status, usage


@dataclass
class _Before:
    """The counters read right before the child starts."""

    disks: dict[str, procfs.DiskCounters]
    helpers: "_Helpers"
    helpers_ns: int
    quiet: noise.Snapshot
    kernel: kernelstats.Snapshot

    @classmethod
    def take(cls, devices: Sequence[str], helpers: "_Helpers", pressure_group: Path | None) -> "_Before":
        # The slower readings first: the devices' counters are read last, next to the clock,
        # as the sampler's first reading is (another writer on the disk moves them meanwhile).
        kernel = kernelstats.Snapshot.take(pressure_group)
        quiet = noise.snapshot()
        helpers_ns = helpers.cpu_ns()
        return cls(procfs.read_diskstats(list(devices)), helpers, helpers_ns, quiet, kernel)


@dataclass(frozen=True)
class _Helpers:
    """The stack's helper processes (FUSE daemons, sshd): their CPU in nanoseconds, from
    their control group where the stack has one (exited threads and children included),
    else from each process's threads."""

    pids: list[int]
    group: Path | None

    def cpu_ns(self) -> int:
        if self.group is not None and (total := procfs.group_cpu_ns(self.group)) is not None:
            return total
        return sum(procfs.cpu_ns(pid) for pid in self.pids)

    @property
    def source(self) -> str | None:
        """Where the figure comes from, for the record."""
        if not self.pids:
            return None
        return "cgroup" if self.group is not None else "threads"


def _counters(
    before: _Before,
    devices: Sequence[str],
    disks_after: dict[str, procfs.DiskCounters],
    usage: Any,
    wall: float,
    maxrss_kb: int | None,
    exit_code: int,
    error: str | None,
    sampler: sampling.Sampler,
    cpus: list[int] | None,
    kernel_after: kernelstats.Snapshot,
) -> RunCounters:
    kernel = kernelstats.delta(before.kernel, kernel_after)
    helper_cpu = max(before.helpers.cpu_ns() - before.helpers_ns, 0) / 1e9
    cpu = usage.ru_utime + usage.ru_stime
    quiet = noise.judge(before.quiet, noise.snapshot(), wall, cpu + helper_cpu)
    per_device = procfs.disk_deltas(before.disks, disks_after)
    # Devices are stacked (loop on vda): totals come from the top device alone.
    top = per_device.get(devices[0], {}) if devices else {}
    return RunCounters(
        status="ok" if error is None else "failed",
        error=error,
        exit_code=exit_code,
        wall_s=wall,
        user_s=usage.ru_utime,
        sys_s=usage.ru_stime,
        cpu_pct=100.0 * cpu / wall if wall > 0 else 0.0,
        maxrss_kb=maxrss_kb if maxrss_kb is not None else usage.ru_maxrss,
        minflt=usage.ru_minflt,
        majflt=usage.ru_majflt,
        inblock=usage.ru_inblock,
        oublock=usage.ru_oublock,
        nvcsw=usage.ru_nvcsw,
        nivcsw=usage.ru_nivcsw,
        read_bytes=top.get("read_bytes", 0),
        write_bytes=top.get("write_bytes", 0),
        read_ios=top.get("read_ios", 0),
        write_ios=top.get("write_ios", 0),
        helper_cpu_s=helper_cpu,
        psi_io_some_s=kernel.psi_io_some_s,
        psi_io_full_s=kernel.psi_io_full_s,
        psi_cpu_some_s=kernel.psi_cpu_some_s,
        psi_memory_some_s=kernel.psi_memory_some_s,
        kthread_cpu_s=kernel.kthread_cpu_s,
        vm_majfault=kernel.vmstat.get("pgmajfault"),
        vm_written_bytes=kernel.vmstat["nr_written"] * procfs.PAGE if "nr_written" in kernel.vmstat else None,
        dirty_peak_bytes=max((s.dirty_bytes for s in sampler.samples), default=None),
        **_bottom_disk(per_device, devices, wall, sampler.samples),
        devices=per_device,
        samples=[sample.as_row() for sample in sampler.samples],
        sampler=sampler.cost.as_dict() if sampler.cost else {},
        facts={
            **quiet,
            **({CPUS.key: cpus} if cpus else {}),
            **({HELPER_CPU_SOURCE.key: before.helpers.source} if before.helpers.source else {}),
            KERNEL.key: _kernel_facts(kernel, devices),
        },
    )


def _bottom_disk(
    per_device: dict[str, dict[str, int]], devices: Sequence[str], wall: float, samples: list[sampling.Sample]
) -> dict[str, Any]:
    """The disk at the bottom of the stack: its bytes written, busy share, wait per request
    and peak queue during the run."""
    bottom = per_device.get(devices[-1]) if devices else None
    if bottom is None:
        return {}
    requests = bottom["read_ios"] + bottom["write_ios"]
    return {
        "disk_write_bytes": bottom["write_bytes"],
        "disk_busy_pct": min(100.0, 100.0 * bottom["busy_ms"] / 1000 / wall) if wall > 0 else None,
        "disk_wait_ms": (bottom["read_ms"] + bottom["write_ms"]) / requests if requests else None,
        "disk_in_flight_peak": max((s.disk_in_flight for s in samples), default=None),
    }


def _kernel_facts(kernel: kernelstats.KernelCounters, devices: Sequence[str]) -> KernelFigures:
    """What the kernel saw that is not a registry metric, for the record and the reports."""
    return KernelFigures(
        psi_scope=kernel.psi_scope,
        system_psi_s={k: round(v, 6) for k, v in kernel.system_psi.items()},
        host_busy_pct=kernel.host_busy_pct,
        host_iowait_pct=kernel.host_iowait_pct,
        host_steal_pct=kernel.host_steal_pct,
        vmstat=kernel.vmstat,
        threads_cpu_s=kernel.threads,
        devices_top_first=list(devices),
    )


def _read_rss(path: str) -> int | None:
    try:
        lines = Path(path).read_text().split()
    except OSError:
        return None
    return int(lines[-1]) if lines and lines[-1].isdigit() else None


# The gate: a small shell that waits for one line on its stdin, then execs the command with
# stdin from /dev/null. If the harness dies first, the pipe closes and the command never runs.
_GATE = 'IFS= read -r go && [ "$go" = go ] && exec "$@" </dev/null; exit 125'


@dataclass(frozen=True)
class _GateCost:
    """What the gate itself used before it exec'd the command: wait4's rusage covers the
    whole life of the pid, so this is taken off again (about 1 ms of CPU, 60 faults)."""

    cpu_s: float
    minflt: int
    majflt: int
    nvcsw: int
    nivcsw: int

    def taken_from(self, usage: Any) -> SimpleNamespace:
        cpu = usage.ru_utime + usage.ru_stime
        # CPU time is split by the kernel between user and system by its samples; take the
        # gate's share off both in the same proportion.
        keep = max(cpu - self.cpu_s, 0.0) / cpu if cpu > 0 else 0.0
        return SimpleNamespace(
            ru_utime=usage.ru_utime * keep,
            ru_stime=usage.ru_stime * keep,
            ru_maxrss=usage.ru_maxrss,
            ru_minflt=max(usage.ru_minflt - self.minflt, 0),
            ru_majflt=max(usage.ru_majflt - self.majflt, 0),
            ru_inblock=usage.ru_inblock,
            ru_oublock=usage.ru_oublock,
            ru_nvcsw=max(usage.ru_nvcsw - self.nvcsw, 0),
            ru_nivcsw=max(usage.ru_nivcsw - self.nivcsw, 0),
        )


class _Gated:
    """The timed child, created before the clock starts and held at a gate: it is put into
    its control groups and onto its CPUs while it waits (moving a process between groups
    can wait milliseconds for the kernel's cgroup lock: measured 15-20 ms for the first
    move after a pause), so the timed region holds the exec of the command and nothing of
    the harness's own. A wrapper (GNU time) runs the gate as its child, started before the
    clock too: exec'd inside the timed region, after dropped caches, it read its binary from
    the disk in every run (about a millisecond, bench/run.py's overhead rows). It runs in its
    own process group, so a timeout or Ctrl-C can stop every process it started."""

    def __init__(self, child: subprocess.Popen[bytes], wrapped: bool) -> None:
        self.child = child
        self.pid = child.pid
        # The gate: the child itself, or the wrapper's child once it has forked it.
        self.gate_pid: int | None = None if wrapped else child.pid

    @classmethod
    def spawn(
        cls, wrapper: list[str], argv: list[str], *, cwd: Path, env: dict[str, str], stderr: Any
    ) -> "_Gated":
        child = subprocess.Popen(
            [*wrapper, "/bin/sh", "-c", _GATE, "layerbench-gate", *argv],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            process_group=0,
        )
        return cls(child, wrapped=bool(wrapper))

    def place(self, cgroup_procs: list[Path], cpus: list[int] | None) -> None:
        self._wait_at_gate()
        pids = self._pids()
        for procs in cgroup_procs:
            cgroups.place_all(pids, procs)
        if cpus:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.sched_setaffinity(pid, cpus)

    def _pids(self) -> list[int]:
        return list(dict.fromkeys(pid for pid in (self.pid, self.gate_pid) if pid is not None))

    def _wait_at_gate(self) -> None:
        """Until the shell sleeps in its read (found first, under a wrapper): what they did
        before is all they will cost."""
        deadline = time.monotonic() + 10
        while self.gate_pid is None and self.child.poll() is None and time.monotonic() < deadline:
            if found := procfs.children(self.pid):
                self.gate_pid = found[0]
            else:
                time.sleep(0.0005)
        while (
            self.gate_pid is not None
            and procfs.process_state(self.gate_pid) not in ("S", None)
            and time.monotonic() < deadline
        ):
            time.sleep(0.0005)

    def cost_so_far(self) -> _GateCost:
        """What the wrapper and the gate used so far (wait4 on the wrapper counts both)."""
        pids = self._pids()
        minflt, majflt = map(sum, zip(*(procfs.process_faults(pid) for pid in pids), strict=True))
        nvcsw, nivcsw = map(sum, zip(*(procfs.context_switches(pid) for pid in pids), strict=True))
        return _GateCost(sum(procfs.cpu_ns(pid) for pid in pids) / 1e9, minflt, majflt, nvcsw, nivcsw)

    def release(self) -> None:
        assert self.child.stdin is not None
        self.child.stdin.write(b"go\n")
        self.child.stdin.close()

    def __enter__(self) -> "_Gated":
        return self

    def __exit__(self, *exc: object) -> None:
        # Grandchildren that outlived the child are not ours to keep; a child never released
        # (an error before the clock) is stopped at its gate and reaped.
        _kill_tree(self.pid)
        if self.child.stdin is not None and not self.child.stdin.closed:
            with contextlib.suppress(OSError):
                self.child.stdin.close()
        if self.child.returncode is None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.child.returncode = -signal.SIGKILL


def _describe_exit(code: int, stderr_path: Path | None) -> str:
    what = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
    if stderr_path and stderr_path.exists():
        tail = stderr_path.read_bytes()[-2000:].decode(errors="replace").strip().splitlines()
        if tail:
            return f"{what}: {tail[-1]}"
    return what


def failed(error: str) -> RunCounters:
    """A run that produced no measurement: every counter zero, derived from the fields."""
    counters: dict[str, Any] = {  # each field's own type, known from the field at run time
        f.name: 0.0 if f.type in (float, "float") else 0
        for f in fields(RunCounters)
        if f.default is MISSING
        and f.default_factory is MISSING
        and f.name not in ("status", "error", "exit_code")
    }
    return RunCounters(status="failed", error=error, exit_code=None, **counters)


def device_chain(runs: list[RunRecord]) -> list[str] | None:
    """The stack's devices, top first, as its runs recorded them (None before they did)."""
    return next(
        (chain for r in runs if (chain := (r.fact(KERNEL) or {}).get("devices_top_first"))),
        None,
    )
