"""What the reports say about stacks that ran in a guest: the accelerator used, and which
counters come from inside the guest and which from the host."""

from typing import Any

from layerbench.core.runs import RunRecord


def notes(runs: list[RunRecord]) -> list[str]:
    seen: dict[str, dict[str, Any]] = {}
    for run in runs:
        guest = run.fact("guest")
        if guest and run.stack not in seen:
            seen[run.stack] = guest
    lines = []
    for stack, guest in seen.items():
        lines.append(
            f"stack {stack} ran in a qemu guest, accelerator {guest['accel']} ({guest['accel_why']}), "
            f"{guest['cpus']} CPU, {guest['memory_mib']} MiB, kernel {guest['kernel']}: wall, "
            "user/sys, faults, block I/O, read/write bytes and guest:* devices are counted inside "
            "the guest; helper CPU is the qemu process and host:* devices the backing disk, on the host"
        )
        if guest["accel"] == "tcg":
            lines.append(
                f"stack {stack}: tcg emulates the guest's CPU, so its CPU-bound costs are "
                "emulation, not hypervisor, overhead"
            )
    return lines
