"""What one trial of each (stack, workload) needs, from the plan alone: where its data
lands (the scratch root's disk, memory, a device), how much, and whether it fits.

A plan that cannot work is refused before anything runs: a write workload on a read-only
stack, more data than the stack's top holds, more memory than the host has available,
more disk than is free under the scratch root. Trials run one at a time and each tears
its stack down, so the need of the plan is that of its largest trial."""

import shutil
from dataclasses import dataclass
from pathlib import Path

from layerbench.core.sizes import format_size
from layerbench.linux import procfs
from layerbench.stacks.base import LayerOptions, Placement, make_layers
from layerbench.workloads.base import WORKLOAD_KINDS, Workload, WorkloadOptions

# Left for the rest of the host (and the page cache of the runs) when memory is counted.
MEMORY_HEADROOM = 512 * 2**20


@dataclass(frozen=True)
class TrialNeed:
    stack: str
    workload: str
    placement: Placement
    data_bytes: int  # what the workload puts on the stack's top
    memory_bytes: int  # taken from the host's memory at once
    disk_bytes: int  # taken from the scratch root's file system at once


def placement(options: list[LayerOptions]) -> Placement:
    """Where data written on the stack's top ends up, bottom to top."""
    placed = Placement()
    for layer in make_layers(options):
        placed = layer.place(placed)
    return placed


def reference_size(stacks: dict[str, list[LayerOptions]]) -> int | None:
    """The smallest file system any stack makes: a fractional fill of a stack on the
    scratch root's own file system writes that much, so every stack writes the same."""
    sizes = [size for layers in stacks.values() for layer in make_layers(layers) if (size := layer.fs_size())]
    return min(sizes) if sizes else None


def needs(stacks: dict[str, list[LayerOptions]], workloads: dict[str, WorkloadOptions]) -> list[TrialNeed]:
    reference = reference_size(stacks)
    found = []
    for stack, layers in stacks.items():
        placed = placement(layers)
        for name, options in workloads.items():
            workload: Workload[WorkloadOptions] = WORKLOAD_KINDS[options.kind](options, name)
            data = workload.data_bytes(placed.capacity, reference)
            memory = placed.reserved_memory + workload.staging_bytes()
            disk = placed.reserved_disk
            if placed.medium == "memory":
                memory += data
            elif placed.medium == "disk":
                disk += data
            found.append(TrialNeed(stack, name, placed, data, memory, disk))
    return found


def plan_refusal(stacks: dict[str, list[LayerOptions]], workloads: dict[str, WorkloadOptions]) -> str | None:
    """Why the plan cannot work on any host: a write on a read-only stack, data that does
    not fit on a stack's top. None when it can."""
    for need in needs(stacks, workloads):
        kind = workloads[need.workload].kind
        workload = WORKLOAD_KINDS[kind](workloads[need.workload], need.workload)
        if not need.placement.writable and workload.writes_onto_top:
            return (
                f"stacks.{need.stack}: is read-only, and workload {need.workload} ({kind}) writes "
                "onto it; every run would fail. Drop readonly = true or use a workload that only reads"
            )
        capacity = need.placement.capacity
        if capacity is not None and need.data_bytes > capacity:
            return (
                f"stacks.{need.stack}: workload {need.workload} ({kind}) writes up to "
                f"{format_size(need.data_bytes)}, which does not fit in the {format_size(capacity)} "
                f"of its top ({need.placement.holder}); every run would fail"
            )
    return None


def host_refusal(
    stacks: dict[str, list[LayerOptions]], workloads: dict[str, WorkloadOptions], scratch_root: Path
) -> str | None:
    """Why this host cannot run the plan's largest trial: memory or scratch disk space."""
    trials = needs(stacks, workloads)
    if not trials:
        return None
    available = procfs.available_memory()
    hungriest = max(trials, key=lambda need: need.memory_bytes)
    if available is not None and hungriest.memory_bytes > max(available - MEMORY_HEADROOM, 0):
        return (
            f"stacks.{hungriest.stack}: a trial of workload {hungriest.workload} holds up to "
            f"{format_size(hungriest.memory_bytes)} in memory ({hungriest.placement.holder}), and "
            f"this host has {format_size(available)} available; it would run out of memory"
        )
    free = shutil.disk_usage(existing_parent(scratch_root)).free
    biggest = max(trials, key=lambda need: need.disk_bytes)
    if biggest.disk_bytes > free:
        return (
            f"stacks.{biggest.stack}: a trial of workload {biggest.workload} puts up to "
            f"{format_size(biggest.disk_bytes)} on the scratch root's file system, and "
            f"{format_size(free)} is free under {scratch_root}; use --scratch on a larger one"
        )
    return None


def largest(stacks: dict[str, list[LayerOptions]], workloads: dict[str, WorkloadOptions]) -> tuple[int, int]:
    """(memory, disk) bytes of the plan's largest trial."""
    trials = needs(stacks, workloads)
    return (
        max((need.memory_bytes for need in trials), default=0),
        max((need.disk_bytes for need in trials), default=0),
    )


def existing_parent(path: Path) -> Path:
    """path, or its nearest ancestor that exists (a scratch root not made yet)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
