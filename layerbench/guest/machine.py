"""The qemu guest: its command line, the accelerator it can use here, and one trial run
inside it (boot, the agent's untimed setup, the timed run bracketed by host counters,
shutdown). Boot and shutdown stay outside the timed region."""

import contextlib
import ctypes
import dataclasses
import json
import os
import signal
import site
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from typing_extensions import TypedDict  # pydantic validates it before Python 3.12

from layerbench.core import failpoints
from layerbench.core.errors import SetupError
from layerbench.core.facts import Fact, declare
from layerbench.guest import kernel
from layerbench.guest.protocol import GuestAnswer, GuestRequest
from layerbench.linux import procfs, system
from layerbench.observe.run_result import RunResult
from layerbench.scratch import Scratch


class GuestFigures(TypedDict, total=False):
    """The vm layer's guest as a run's `guest` fact."""

    accel: str
    accel_why: str
    cpus: int
    memory_mib: int
    kernel: str
    counters_from: str
    host_wall_s: float
    boot_and_setup_s: float
    guest_uptime: dict[str, float]
    guest_helper_cpu_s: float | None
    mount_lines: list[str]
    devices: list[str]


GUEST = Fact(
    "guest",
    "after",
    "the vm layer's guest: accelerator, CPUs, memory, kernel, boot time, its mounts and "
    "devices, where each counter came from",
    GuestFigures,
)
declare(GUEST)

QEMU = "qemu-system-x86_64"
_PR_SET_PDEATHSIG = 1
_PROBE_SECONDS = 30.0
# Untimed work in the guest (boot, build upper layers, prepare) may be slow under tcg.
_READY_SECONDS = 1800.0
# The stock kernel reports this once /init runs; a guest that never gets there failed.
_INIT_MARKER = "layerbench-init: started"


# The guest sees the host's root read-only over 9p, but these are its own, empty tmpfs.
GUEST_TMPFS = ("/tmp", "/run")


def hidden_in_guest(paths: list[str]) -> list[str]:
    """Those of paths the guest cannot see (they lie under a guest's own tmpfs)."""
    return [p for p in paths if any(Path(p).resolve().is_relative_to(t) for t in GUEST_TMPFS)]


def guest_python_path() -> list[str]:
    """Where the guest's interpreter finds layerbench and its packages (the host's own)."""
    return [str(Path(__file__).resolve().parent.parent.parent), *site.getsitepackages()]


def unseen_in_guest() -> str | None:
    """Why the guest could not run this layerbench, if it could not."""
    hidden = hidden_in_guest([sys.executable, *guest_python_path()])
    if not hidden:
        return None
    return (
        f"the guest mounts its own {' and '.join(GUEST_TMPFS)} over the host's, so it cannot see "
        f"{hidden[0]}: run layerbench from a checkout and a Python outside them"
    )


@dataclass(frozen=True)
class MachineSpec:
    cpus: int
    memory_mib: int
    accel: str  # kvm or tcg, resolved
    disk_image: Path
    disk_cache: str
    disk_bus: str  # virtio-blk or virtio-scsi
    share: Path  # host directory the guest mounts read-write at the same path
    console: Path  # the guest's serial console, for errors
    # A host directory the workload runs on, shared over 9p (the vm layer's share = "9p"),
    # mounted in the guest at the same path with these 9p options (msize, cache).
    work_share: Path | None = None
    work_share_options: str = ""

    @property
    def mitigations_off(self) -> bool:
        """tcg runs no instruction speculatively: the Spectre and Meltdown mitigations the guest
        kernel picks for the CPU model qemu presents guard nothing there, and page table
        isolation flushes tcg's TLB at every system call (a boot's setup took 1.7 s longer)."""
        return self.accel == "tcg"


def qemu_version() -> str:
    return system.tool_version(QEMU) or "unknown"


def command(spec: MachineSpec, guest: kernel.GuestKernel, *, quiet: bool = True) -> list[str]:
    disk = f"file={spec.disk_image},format=raw,if=none,id=disk0,cache={spec.disk_cache}"
    if spec.disk_cache in ("none", "directsync"):
        disk += ",aio=native"
    if spec.disk_bus == "virtio-scsi":
        disk_devices = [
            "-device", "virtio-scsi-device,id=scsi0",
            "-device", "scsi-hd,drive=disk0,bus=scsi0.0",
        ]  # fmt: skip
    else:
        disk_devices = ["-device", "virtio-blk-device,drive=disk0"]
    # tsc=reliable: the clocksource watchdog compares the TSC with jiffies, which lag
    # under emulation, and would switch the guest to that lagging clock.
    append = f"console=ttyS0 panic=-1 reboot=t tsc_early_khz={tsc_khz()} tsc=reliable"
    if spec.mitigations_off:
        append += " mitigations=off"
    if quiet:
        append += " quiet loglevel=3"
    return [
        QEMU,
        "-name", "layerbench,debug-threads=off",
        "-accel", spec.accel,
        "-M", "microvm",
        "-cpu", "max" if spec.accel == "tcg" else "host",
        "-smp", str(spec.cpus),
        "-m", str(spec.memory_mib),
        "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
        "-serial", f"file:{spec.console}",
        "-kernel", str(guest.vmlinuz),
        "-initrd", str(guest.initramfs),
        "-append", append,
        "-drive", disk,
        *disk_devices,
        "-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
        "-device", "virtio-9p-device,fsdev=hostroot,mount_tag=hostroot",
        "-fsdev", f"local,id=lbshare,path={spec.share},security_model=none,multidevs=remap",
        "-device", "virtio-9p-device,fsdev=lbshare,mount_tag=lbshare",
        *_work_share(spec),
    ]  # fmt: skip


def _work_share(spec: MachineSpec) -> list[str]:
    if spec.work_share is None:
        return []
    # passthrough: the guest's root owns what it writes, as a container runtime's share does.
    return [
        "-fsdev", f"local,id=lbwork,path={spec.work_share},security_model=passthrough,multidevs=remap",
        "-device", "virtio-9p-device,fsdev=lbwork,mount_tag=lbwork",
    ]  # fmt: skip


def tsc_khz() -> int:
    """The host's TSC rate. microvm has no PIT or HPET to calibrate the guest's TSC against,
    and a guest without it hangs early in boot; under tcg its TSC ticks at the host's rate."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("cpu MHz"):
            return round(float(line.split(":")[1]) * 1000)
    return 2_000_000


def _die_with_parent() -> None:
    # If layerbench is killed, the guest goes with it; `clean` is the second line of defence.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as handle:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=handle,
            start_new_session=True,  # a Ctrl-C reaches layerbench, which stops the guest in order
            preexec_fn=_die_with_parent,
        )


def qemu_cpu_seconds(pid: int) -> float:
    """user + sys of the qemu process, all its threads."""
    stat = procfs.pid_stat(pid)
    return stat.cpu_s if stat else 0.0


def tail(path: Path, lines: int = 1) -> str:
    try:
        text = path.read_bytes()[-4000:].decode(errors="replace")
    except OSError:
        return ""
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


# ---- the accelerator ---------------------------------------------------------------------


def resolve_accel(wanted: str, scratch_dir: Path | None = None) -> tuple[str, str]:
    """(accelerator, why). `auto` takes kvm only if a stock guest really boots with it:
    a paravirtual /dev/kvm (nested PVM) opens fine but cannot run a stock kernel."""
    if wanted != "auto":
        return wanted, "as the plan asks"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg", "auto: no usable /dev/kvm"
    guest = kernel.guest_kernel()
    key = f"{qemu_version()} | host {os.uname().release} | guest {guest.initramfs}"
    cache = kernel.cache_dir() / "accel.json"
    with contextlib.suppress(OSError, ValueError):
        known = json.loads(cache.read_text())
        if known.get("key") == key:
            return str(known["accel"]), str(known["why"])
    boots = _kvm_boots(guest, scratch_dir or kernel.cache_dir())
    accel, why = (
        ("kvm", "auto: a trial boot with kvm succeeded")
        if boots
        else ("tcg", "auto: /dev/kvm cannot run a stock guest kernel (trial boot failed)")
    )
    cache.write_text(json.dumps({"key": key, "accel": accel, "why": why}))
    return accel, why


def _kvm_boots(guest: kernel.GuestKernel, where: Path) -> bool:
    """Boot the guest with kvm and no devices: its init announces itself, then powers off
    (it finds no share). A guest that never gets that far cannot run here."""
    probe = where / f"kvm-probe-{os.getpid()}"
    probe.mkdir(parents=True, exist_ok=True)
    try:
        console = probe / "console.log"
        argv = [
            QEMU, "-accel", "kvm", "-M", "microvm", "-cpu", "host", "-smp", "1", "-m", "256",
            "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
            "-serial", f"file:{console}",
            "-kernel", str(guest.vmlinuz), "-initrd", str(guest.initramfs),
            "-append", f"console=ttyS0 panic=-1 reboot=t quiet tsc_early_khz={tsc_khz()}",
        ]  # fmt: skip
        child = start(argv, probe / "qemu.log")
        try:
            deadline = time.monotonic() + _PROBE_SECONDS
            while time.monotonic() < deadline and child.poll() is None:
                if _INIT_MARKER in tail(console, 200):
                    return True
                time.sleep(0.1)
            return _INIT_MARKER in tail(console, 200)
        finally:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            child.wait()
    finally:
        for item in probe.iterdir():
            item.unlink()
        probe.rmdir()


# ---- one trial inside the guest ------------------------------------------------------------


@dataclass
class _Measured:
    """What the host saw of one guest run."""

    answer: GuestAnswer
    host_wall_s: float
    booted_s: float
    qemu_cpu_s: float
    host_devices: dict[str, dict[str, int]]


class GuestTrial:
    """What the vm layer hands the trial: "run the rest of this trial in the guest"."""

    def __init__(
        self,
        scratch: Scratch,
        spec: MachineSpec,
        guest: kernel.GuestKernel,
        *,
        disk_mount: Path,
        disk_fs: str,
        disk_size: int,
        accel_why: str,
    ) -> None:
        self.scratch = scratch
        self.spec = spec
        # On a 9p share the workload's files are the host's: the guest's scratch root is there.
        self.top = spec.work_share if spec.work_share is not None else disk_mount
        self.guest = guest
        self.disk_mount = disk_mount
        self.disk_fs = disk_fs
        self.disk_size = disk_size
        self.accel_why = accel_why

    def describe(self) -> str:
        return (
            f"qemu guest: accel {self.spec.accel} ({self.accel_why}), {self.spec.cpus} CPU, "
            f"{self.spec.memory_mib} MiB, microvm, kernel {self.guest.release}, "
            f"disk {self.spec.disk_bus} cache={self.spec.disk_cache} on {self.spec.disk_image}"
            + (", mitigations off (tcg runs nothing speculatively)" if self.spec.mitigations_off else "")
            + (
                f", the workload on {self.spec.work_share} over 9p ({self.spec.work_share_options})"
                if self.spec.work_share is not None
                else ""
            )
        )

    def run(self, request: GuestRequest, host_devices: list[str], timeout: float | None) -> RunResult:
        """The rest of the trial in a freshly booted guest: its result, with the host's view
        of the run (qemu's CPU, the host's devices) put beside the guest's own counters."""
        share = self.spec.share
        self._write_boot_env(self.guest.modules_on_request(request.kernel_modules))
        fs_size = self.disk_size if self.spec.work_share is None else None
        request = request.model_copy(update={"scratch": str(self.top / "scratch"), "fs_size": fs_size})
        (share / "request.json").write_text(request.model_dump_json())
        measured = self._boot_and_run(host_devices, timeout)
        answer = measured.answer
        if answer.result is None:
            raise SetupError(f"in the guest: {answer.error or 'no result'}")
        counters = answer.result.counters
        guest_helper_cpu = counters.helper_cpu_s
        counters = dataclasses.replace(
            counters,
            helper_cpu_s=measured.qemu_cpu_s,
            devices={f"guest:{k}": v for k, v in counters.devices.items()} | measured.host_devices,
        )
        facts = {
            **answer.result.facts,
            GUEST.key: {
                "accel": self.spec.accel,
                "accel_why": self.accel_why,
                "cpus": self.spec.cpus,
                "memory_mib": self.spec.memory_mib,
                "kernel": self.guest.release,
                "counters_from": "guest: wall, rusage, read/write bytes, guest:* devices; "
                "host: helper_cpu_s (the qemu process), host:* devices",
                "host_wall_s": measured.host_wall_s,
                "boot_and_setup_s": measured.booted_s,
                "guest_uptime": answer.phases,
                "guest_helper_cpu_s": guest_helper_cpu,
                "mount_lines": answer.mount_lines,
                "devices": answer.devices,
            },
        }
        return dataclasses.replace(answer.result, counters=counters, facts=facts)

    def _write_boot_env(self, modules: list[str]) -> None:
        share = self.spec.share
        disk_device = "/dev/sda" if self.spec.disk_bus == "virtio-scsi" else "/dev/vda"
        # The interpreter starts with -S (site's .pth files cost seconds under emulation),
        # so the host's site-packages come in through PYTHONPATH.
        python_path = ":".join(guest_python_path())  # visible in the guest: VmLayer.missing checked
        (share / "boot.env").write_text(
            f"SHARE='{share}'\nDISK_MOUNT='{self.disk_mount}'\nDISK_FS='{self.disk_fs}'\n"
            f"DISK_DEVICE='{disk_device}'\nPYTHONPATH='{python_path}'\n"
            f"WORK_MOUNT='{self.spec.work_share or ''}'\nWORK_OPTIONS='{self.spec.work_share_options}'\n"
            # The host's own interpreter, with the packages layerbench was installed with.
            f"PYTHON='{sys.executable}'\n"
            f"MODULES='{' '.join(modules)}'\n"
            # The test-only switch of a final sync that stops at the top (failpoints), so a
            # test can leave data dirty where no program of the host can sync it.
            f"SYNC_TOP_ONLY='{'1' if failpoints.sync_top_only() else ''}'\n"
        )

    def _boot_and_run(self, host_devices: list[str], timeout: float | None) -> "_Measured":
        """Boot the guest (a journaled helper), let it prepare, then time its run from here."""
        share = self.spec.share
        argv = command(self.spec, self.guest)

        def launch() -> subprocess.Popen[bytes]:
            return start(argv, self.spec.console.with_name("qemu.log"))

        with self.scratch.process(
            launch, f"qemu guest {self.spec.disk_image}", named=self.spec.disk_image
        ) as qemu:
            pid = qemu.pid
            boot_started = time.monotonic()
            self._wait_for(share / "ready", qemu, _READY_SECONDS, "get ready")
            booted_s = time.monotonic() - boot_started
            cpu_before = qemu_cpu_seconds(pid)
            disks_before = procfs.read_diskstats(host_devices)
            go_at = time.monotonic()
            (share / "go").write_text("go\n")
            limit = (timeout or 24 * 3600.0) + 120
            self._wait_for(share / "result.json", qemu, limit, "finish the run")
            measured = _Measured(
                answer=GuestAnswer.model_validate_json((share / "result.json").read_text()),
                host_wall_s=time.monotonic() - go_at,
                booted_s=booted_s,
                qemu_cpu_s=max(qemu_cpu_seconds(pid) - cpu_before, 0.0),
                host_devices=procfs.disk_deltas(disks_before, procfs.read_diskstats(host_devices), "host:"),
            )
            # The agent answers before its layers come down: nothing in the guest is worth
            # waiting for now, and leaving the block below stops qemu.
        return measured

    def _wait_for(self, path: Path, qemu: subprocess.Popen[bytes], seconds: float, what: str) -> None:
        deadline = time.monotonic() + seconds
        while not path.exists():
            if (self.spec.share / "result.json").exists():
                return  # the agent failed before this step and says why
            if qemu.poll() is not None:
                console = tail(self.spec.console, 3) or tail(self.spec.console.with_name("qemu.log"), 3)
                raise SetupError(f"the guest stopped before it could {what}: {console or 'no output'}")
            if time.monotonic() > deadline:
                raise SetupError(f"the guest did not {what} within {seconds:.0f}s")
            time.sleep(0.01)
