"""Is this host fit to measure on? Each check says what it found and, when something is
wrong, the one line that fixes it. `run` shows the cheap checks' warnings at its start."""

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from layerbench.core.errors import UserError
from layerbench.core.sizes import format_size
from layerbench.experiment import make_workloads
from layerbench.linux import procfs, system
from layerbench.observe import sentinel, tracing
from layerbench.observe.busy import BusyWindow
from layerbench.plan import Plan, footprint
from layerbench.scratch import Scratch, check_root
from layerbench.stacks.base import make_layers

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"

# Tools layerbench's layers, workloads and hosts use: the Debian package comes from system.py.
TOOLS = (
    "mount",
    "losetup",
    "mkfs.ext4",
    "mkfs.xfs",
    "mkfs.btrfs",
    "tar",
    "zstd",
    "xz",
    "fio",
    "bindfs",
    "fusermount3",
    "qemu-system-x86_64",
)
BUSY_CPU_SHARE = 0.10  # another process using 10 % of a CPU disturbs a 2-core machine
IDLE_S = 10.0  # the slow-first-write effect shows after about 10 s without I/O
PROBE_BYTES = 128 * 2**20
SLOW_FIRST_WRITE = 1.5  # first write after idle this many times slower than the next: warm up


@dataclass
class Check:
    name: str
    status: str  # ok, warn, fail, info
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    def line(self) -> str:
        return f"{self.name}: {self.detail}" + (f" (fix: {self.fix})" if self.fix else "")


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


# ---- capabilities -------------------------------------------------------------------------


def check_root_user() -> Check:
    if os.geteuid() == 0:
        return Check("root", OK, "running as root")
    return Check("root", FAIL, "not root: mounts, loop devices and drop_caches need it", "run it with sudo")


def _kernel_has(fs: str) -> bool:
    return procfs.kernel_has_filesystem(fs)


def check_kernel_features() -> list[Check]:
    checks = []
    loop = Path("/dev/loop-control").exists()
    checks.append(
        Check("loop devices", OK, "/dev/loop-control present")
        if loop
        else Check("loop devices", FAIL, "no /dev/loop-control: image layers cannot run", "modprobe loop")
    )
    for fs, used_by in (("overlay", "overlay layers"), ("tmpfs", "tmpfs layers")):
        checks.append(
            Check(fs, OK, "the kernel has it")
            if _kernel_has(fs)
            else Check(fs, WARN, f"not in this kernel: no {used_by}", f"modprobe {fs}")
        )
    checks.append(
        Check("9p", OK, "the kernel has it")
        if _kernel_has("9p")
        else Check(
            "9p",
            INFO,
            "not in this kernel: this host cannot mount 9p itself; qemu's -fsdev still serves a "
            "host directory to a guest whose kernel has 9p",
            "modprobe 9p (only needed to mount 9p on this host)",
        )
    )
    if _kernel_has("fuse") and Path("/dev/fuse").exists():
        checks.append(Check("fuse", OK, "the kernel has it and /dev/fuse is present"))
    else:
        checks.append(Check("fuse", WARN, "no fuse (or no /dev/fuse): no bindfs layers", "modprobe fuse"))
    return checks


def check_kvm() -> Check:
    """Whether /dev/kvm can run a stock guest kernel; cheap (no guest is started)."""
    # /sys/module lists built-in modules too; /proc/modules only loadable ones (if any).
    modules = {p.name for p in Path("/sys/module").glob("kvm*")}
    modules |= {line.split()[0] for line in _read("/proc/modules").splitlines() if line.strip()}
    flags = set()
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    if not Path("/dev/kvm").exists():
        return Check("kvm", WARN, "no /dev/kvm: VMs run under qemu's tcg emulation (slow)", "modprobe kvm")
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR))
    except OSError as exc:
        return Check("kvm", WARN, f"/dev/kvm not usable ({exc.strerror}); use qemu -accel tcg", "run as root")
    if "kvm_pvm" in modules:
        return Check(
            "kvm",
            WARN,
            "/dev/kvm is a paravirtual nested KVM (kvm_pvm): it only runs guest kernels built for "
            "PVM; a stock guest kernel dies early, so VMs here must use qemu -accel tcg",
            "use -accel tcg here, or a host with vmx/svm",
        )
    if flags & {"vmx", "svm"}:
        return Check("kvm", OK, f"/dev/kvm usable, CPU has {'vmx' if 'vmx' in flags else 'svm'}")
    return Check(
        "kvm",
        WARN,
        "/dev/kvm present but the CPU shows no vmx/svm: a stock guest may not run; use -accel tcg",
        "enable nested virtualization on the hypervisor",
    )


def check_tracing(plan: Plan | None) -> Check:
    """trace = "block": bpftrace, BTF and tracefs (mounted by the run in its own namespace)."""
    asked = plan is not None and any(getattr(w, "trace", None) for w in plan.workloads.values())
    if reason := tracing.missing():
        return Check(
            "tracing",
            WARN if asked else INFO,
            f'trace = "block" cannot run: {reason}',
            "apt-get install bpftrace",
        )
    where = (
        "mounted"
        if tracing.TRACEFS.joinpath("events").exists()
        else "mounted by each run in its own namespace"
    )
    return Check("tracing", OK, f'trace = "block" can run: {tracing.program()}, BTF, tracefs {where}')


def check_tools(plan: Plan | None) -> list[Check]:
    needed: set[str] = set()
    if plan is not None:
        for stack in plan.stacks:
            for layer in make_layers(plan.stacks[stack]):
                needed |= set(type(layer).tools) | set(type(layer).extra_tools(layer.options))
        for workload in make_workloads(plan).values():
            needed |= set(getattr(type(workload), "tools", ()))
    checks = []
    for tool in sorted(set(TOOLS) | needed):
        package = system.PACKAGE_OF_TOOL.get(tool, tool)
        if system.tool_path(tool):
            checks.append(Check(f"tool {tool}", OK, system.tool_path(tool) or ""))
        else:
            status = FAIL if tool in needed else WARN
            why = "the plan needs it" if tool in needed else "not installed"
            checks.append(Check(f"tool {tool}", status, why, f"apt-get install {package}"))
    return checks


# ---- space --------------------------------------------------------------------------------


def plan_needs_bytes(plan: Plan) -> int:
    """An upper estimate of the scratch root's disk one trial uses at once (see footprint)."""
    return footprint.largest(plan.stacks, plan.workloads)[1]


def check_space(scratch_root: Path, plan: Plan | None) -> Check:
    where = footprint.existing_parent(scratch_root)
    usage = shutil.disk_usage(where)
    if plan is None:
        return Check("space", INFO, f"{format_size(usage.free)} free under {scratch_root}")
    need = plan_needs_bytes(plan)
    detail = (
        f"{format_size(usage.free)} free under {scratch_root}; "
        f"plan {plan.name!r} needs up to {format_size(need)}"
    )
    if usage.free < need:
        return Check("space", FAIL, detail, "free space there, or use --scratch on a larger file system")
    return Check("space", OK, detail)


def check_memory(plan: Plan | None) -> Check:
    available = procfs.available_memory()
    if available is None:
        return Check("memory", INFO, "/proc/meminfo has no MemAvailable")
    if plan is None:
        return Check("memory", INFO, f"{format_size(available)} available")
    need = footprint.largest(plan.stacks, plan.workloads)[0]
    detail = (
        f"{format_size(available)} available; plan {plan.name!r} holds up to {format_size(need)} in memory"
    )
    if need > available - footprint.MEMORY_HEADROOM:
        return Check("memory", FAIL, detail, "smaller tmpfs layers or workloads, or a host with more memory")
    return Check("memory", OK, detail)


# ---- noise --------------------------------------------------------------------------------


def check_busy_processes(window: BusyWindow | None = None) -> Check:
    """Other processes using a tenth of a CPU or more: over the window the command opened
    as it started (a run's), else over a new one."""
    busy = (window or BusyWindow()).busy(BUSY_CPU_SHARE)
    if not busy:
        return Check("busy processes", OK, f"none above {BUSY_CPU_SHARE:.0%} of a CPU")
    listed = ", ".join(f"{name} (pid {pid}, {share:.0%})" for share, pid, name in busy[:4])
    return Check(
        "busy processes", WARN, f"{len(busy)} busy: {listed}", "stop them, or measure when they are done"
    )


def check_load() -> Check:
    load = os.getloadavg()[0]
    cpus = os.cpu_count() or 1
    detail = f"load average {load:.2f} on {cpus} CPUs"
    if load > 0.5 * cpus:
        return Check("load", WARN, detail, "wait for a quieter machine; more repetitions help")
    return Check("load", OK, detail)


def check_swap() -> Check:
    meminfo = {
        line.split(":")[0]: int(line.split()[1]) * 1024
        for line in _read("/proc/meminfo").splitlines()
        if line
    }
    used = meminfo.get("SwapTotal", 0) - meminfo.get("SwapFree", 0)
    if used > 0:
        return Check("swap", WARN, f"{format_size(used)} of swap in use", "swapoff -a && swapon -a")
    return Check("swap", OK, "no swap in use")


def check_governor() -> Check:
    governors = {
        _read(str(p)).strip()
        for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor")
    }
    if not governors:
        return Check(
            "CPU governor", INFO, "no cpufreq here (a VM or fixed clock): the host sets the frequency"
        )
    if governors == {"performance"}:
        return Check("CPU governor", OK, "performance")
    return Check(
        "CPU governor",
        WARN,
        f"{', '.join(sorted(governors))}: the clock changes under load",
        "cpupower frequency-set -g performance",
    )


def check_thp() -> Check:
    enabled = _read("/sys/kernel/mm/transparent_hugepage/enabled").strip()
    active = next((w.strip("[]") for w in enabled.split() if w.startswith("[")), "")
    if not active:
        return Check("THP", INFO, "no transparent huge pages setting")
    if active == "always":
        return Check(
            "THP",
            WARN,
            "transparent huge pages 'always': khugepaged compacts memory during runs",
            "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled",
        )
    return Check("THP", OK, f"transparent huge pages '{active}'")


# ---- the slow first write after idle (a probe, ~11 s) -------------------------------------


def _timed_write(path: Path) -> float:
    return sentinel.fsync_write_seconds(path, PROBE_BYTES, b"\0")


@contextlib.contextmanager
def _probe_directory(scratch_root: Path) -> Iterator[Path]:
    # Not a run session: a probe only looks, and leaves an earlier run's leftovers to clean.
    with Scratch(scratch_root) as scratch:
        scratch.lock("layerbench doctor")
        with scratch.directory("doctor") as directory:
            yield directory


def check_idle_write(scratch_root: Path, idle_s: float = IDLE_S) -> Check:
    """Write 128 MiB (fsync'd) after idle_s without I/O from us, then twice more at once."""
    try:
        with _probe_directory(scratch_root) as directory:
            time.sleep(idle_s)
            times = [_timed_write(directory / f"probe{i}") for i in range(3)]
    except UserError as exc:
        return Check("first write after idle", INFO, f"not probed: {exc}")
    first, warm = times[0], min(times[1:])
    speeds = ", ".join(f"{PROBE_BYTES / t / 1e6:.0f}" for t in times)
    detail = (
        f"{format_size(PROBE_BYTES)} fsync'd after {idle_s:.0f} s idle, then twice at once: {speeds} MB/s; "
        f"the first is {first / warm:.1f}x slower"
    )
    if first / warm >= SLOW_FIRST_WRITE:
        return Check(
            "first write after idle",
            WARN,
            detail + ": warm-up is required",
            "keep warmup >= 1 and order = 'interleaved' in the plan",
        )
    return Check("first write after idle", OK, detail + ": no slow start seen")


# ---- all of it ----------------------------------------------------------------------------


NOISE: tuple[Callable[[], Check], ...] = (
    check_busy_processes,
    check_load,
    check_swap,
    check_governor,
    check_thp,
)


def diagnose(scratch_root: Path, plan: Plan | None, *, probe: bool = True) -> list[Check]:
    """Every check; the idle-write probe (about 11 s) only with probe=True."""
    checks = [
        check_root_user(),
        *check_kernel_features(),
        check_kvm(),
        *check_tools(plan),
        check_tracing(plan),
    ]
    checks += [check_space(check_root(scratch_root), plan), check_memory(plan)]
    checks += [check() for check in NOISE]
    if probe and os.geteuid() == 0:
        checks.append(check_idle_write(scratch_root))
    return checks


def warnings_before_run(scratch_root: Path, plan: Plan | None, busy: BusyWindow | None = None) -> list[str]:
    """The cheap checks' warnings that matter to the run about to start (well under a second;
    busy: the window the run opened as it started)."""
    noise = [check() for check in NOISE if check is not check_busy_processes]
    checks = [check_space(scratch_root, plan), check_memory(plan), check_busy_processes(busy), *noise]
    return [f"doctor: {c.line()}" for c in checks if c.status in (WARN, FAIL)]
