"""What the reports say about stacks that ran in a guest: the accelerator used, and which
counters come from inside the guest and which from the host."""

from layerbench.core.runs import RunRecord
from layerbench.guest.machine import GUEST, GuestFigures


def notes(runs: list[RunRecord]) -> list[str]:
    seen: dict[str, GuestFigures] = {}
    for run in runs:
        guest = run.fact(GUEST)
        if guest and run.stack not in seen:
            seen[run.stack] = guest
    lines = []
    for stack, guest in seen.items():
        accel = f"{guest.get('accel')} ({guest.get('accel_why')})"
        lines.append(
            f"stack {stack} ran in a qemu guest, accelerator {accel}, "
            f"{guest.get('cpus')} CPU, {guest.get('memory_mib')} MiB, kernel {guest.get('kernel')}: wall, "
            "user/sys, faults, block I/O, read/write bytes and guest:* devices are counted inside "
            "the guest; helper CPU is the qemu process and host:* devices the backing disk, on the host"
        )
        if guest.get("accel") == "tcg":
            lines.append(
                f"stack {stack}: tcg emulates the guest's CPU, so its CPU-bound costs are "
                "emulation, not hypervisor, overhead"
            )
    return lines
