"""What the machine is: recorded with every experiment, printed in the Hardware/OS block."""

import concurrent.futures
import os
import platform
from pathlib import Path
from typing import Any

from layerbench import __version__
from layerbench.linux import damon, mounts, system
from layerbench.observe import fsstate, kernelstats


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _cpu_model() -> str:
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory_bytes() -> int:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def _distribution() -> str:
    fields = {}
    for line in (_read("/etc/os-release") or "").splitlines():
        key, _, value = line.partition("=")
        fields[key] = value.strip('"')
    return fields.get("PRETTY_NAME", "unknown")


# PCI vendor ids of paravirtual disks, which report no model string.
_VENDORS = {"0x1af4": "virtio disk", "0x15ad": "VMware disk", "0x1414": "Hyper-V disk"}


def _disk(name: str) -> dict[str, Any]:
    base = f"/sys/block/{name}"
    scheduler = _read(f"{base}/queue/scheduler") or ""
    active = next((w.strip("[]") for w in scheduler.split() if w.startswith("[")), scheduler)
    vendor = _read(f"{base}/device/vendor")
    model = _read(f"{base}/device/model") or _VENDORS.get(vendor or "", vendor) or "unknown"
    return {
        "name": name,
        "model": model,
        "scheduler": active,
        "rotational": _read(f"{base}/queue/rotational") == "1",
        "size_bytes": int(_read(f"{base}/size") or 0) * 512,
    }


def _virtualization() -> str:
    flags = _read("/proc/cpuinfo") or ""
    return "guest (hypervisor flag)" if " hypervisor" in flags else "bare metal or unknown"


def _free_page_reporting_order() -> int | None:
    """The order of the blocks the kernel hands back to its hypervisor once free (9: 2 MiB),
    where it has handed any back; None where it does not."""
    if not kernelstats.read_reported_kib():
        return None
    order = _read("/sys/module/page_reporting/parameters/page_reporting_order")
    return int(order) if order and order.isdigit() else None


def describe(scratch_root: Path) -> dict[str, Any]:
    scratch_fs = fsstate.describe(scratch_root)
    devices = mounts.devices_under(scratch_root)
    return {
        "hostname": platform.node(),
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
        "kernel": f"{platform.system()} {platform.release()}",
        "kernel_version": platform.version(),
        "distribution": _distribution(),
        "virtualization": _virtualization(),
        "scratch_root": str(scratch_root),
        # Loop images live under the scratch root: on this same file system.
        "scratch_fs": scratch_fs,
        "disks": [_disk(mounts.whole_disk(d)) for d in devices][:1],
        # What the kernel does to memory behind the runs' backs (the host's choice, not ours).
        "free_page_reporting_order": _free_page_reporting_order(),
        "damon_schemes": [scheme.as_json() for scheme in damon.running_schemes()],
        "python": platform.python_version(),
        "layerbench": __version__,
        "tools": _tool_versions(),
    }


_TOOLS = (
    ("mkfs.ext4", "-V"),
    ("mkfs.xfs", "-V"),
    ("mkfs.btrfs", "--version"),
    ("tar", "--version"),
    ("fio", "--version"),
    ("bindfs", "--version"),
    ("qemu-system-x86_64", "--version"),
)


def _tool_versions() -> dict[str, str | None]:
    # Asked side by side: each is a process start (qemu's about 0.1 s), and every run waits
    # for them before its first trial.
    with concurrent.futures.ThreadPoolExecutor(len(_TOOLS)) as pool:
        answers = pool.map(lambda tool: system.tool_version(*tool), _TOOLS)
        return {name: version for (name, _), version in zip(_TOOLS, answers, strict=True)}


def memory_summary(free_page_reporting_order: int | None, damon_schemes: list[dict[str, Any]]) -> str | None:
    """What the kernel does to memory behind the runs, in words (None: nothing known)."""
    parts = []
    if free_page_reporting_order is not None:
        block = 4 * 2**free_page_reporting_order
        parts.append(
            f"free page reporting on (free blocks of {block // 1024} MiB go back to the hypervisor "
            "2 s after a free; a run that takes them again pays a host fault per page)"
            if block >= 1024
            else f"free page reporting on (free blocks of {block} KiB go back to the hypervisor)"
        )
    for stored in damon_schemes:
        try:
            scheme = damon.Scheme(**stored)
        except TypeError:
            continue  # stored by another version: its keys differ
        parts.append(scheme.sentence())
    return "; ".join(parts) or None
