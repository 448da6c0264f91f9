"""The drift sentinel: a short fixed probe of the host, run before the first trial, between
trials as often as its budget allows (2 % of the experiment's time: about every 5 s here)
and after the last when the budget allows that too, outside the timed runs, and stored with
the experiment.

Absolute times on a shared or virtual host drift: a hypervisor that takes free pages back
makes touching fresh memory several times dearer, a neighbour loads the CPU, the scratch
root's file system fills or fragments. Every stack pays such a change alike, so it hides
in ratios taken in one experiment, but not in a comparison of two experiments. The
sentinel measures the same small things each time, so a report and `compare` can say
which part of the host moved. Each part is one registry entry; adding one touches nothing
else (the store keeps parts as a JSON object)."""

import mmap
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerbench.observe import cpu_speed

CPU_LOOP = 1_000_000  # iterations of a fixed Python loop: ~25 ms here
MEMORY_BYTES = 64 << 20  # fresh anonymous pages touched once each
DEVICE_BYTES = 4 << 20  # written, fsync'd and deleted on the scratch root's file system
FILE_COUNT = 300  # created, stat'ed and deleted there
PAGE = mmap.PAGESIZE
BUDGET = 0.02  # the sentinel's share of an experiment's time, at most
SPACING = 1 / BUDGET  # so a probe waits for this many times its own cost since the last


@dataclass(frozen=True)
class Part:
    name: str
    label: str  # how a drift line names it
    probe: Callable[[Path], float]  # the probe's directory -> seconds


def _cpu(_: Path) -> float:
    return cpu_speed.fixed_loop(CPU_LOOP)


def _memory(_: Path) -> float:
    began = time.perf_counter()
    region = mmap.mmap(-1, MEMORY_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        for offset in range(0, MEMORY_BYTES, PAGE):
            region[offset] = 1
    finally:
        region.close()
    return time.perf_counter() - began


def fsync_write_seconds(path: Path, size: int, byte: bytes = b"\x5a") -> float:
    """Seconds to write size bytes (of byte) into a new file at path and fsync it; the file
    goes after."""
    block = byte * (1 << 20)
    began = time.perf_counter()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(max(1, size // len(block))):
            os.write(descriptor, block)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    elapsed = time.perf_counter() - began
    path.unlink()
    return elapsed


def _device(directory: Path) -> float:
    return fsync_write_seconds(directory / "fsync.dat", DEVICE_BYTES)


def _files(directory: Path) -> float:
    tree = directory / "files"
    began = time.perf_counter()
    tree.mkdir()
    names = [tree / f"f{i:04d}" for i in range(FILE_COUNT)]
    for name in names:
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT, 0o600))
    for name in names:
        os.stat(name)
    for name in names:
        os.unlink(name)
    tree.rmdir()
    return time.perf_counter() - began


PARTS: dict[str, Part] = {
    part.name: part
    for part in (
        Part("cpu", "CPU", _cpu),
        Part("memory", "memory (first touch of fresh pages)", _memory),
        Part("scratch_fs", "scratch file system (create/stat/delete)", _files),
        Part("device", "device (fsync'd write)", _device),
    )
}


@dataclass(frozen=True)
class Sample:
    """One probe: each part's seconds, when it ran and after which trial."""

    seq: int
    taken: str
    after_trial: int | None  # None: before the first trial
    parts: dict[str, float]
    cost_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def probe(directory: Path) -> tuple[dict[str, float], float]:
    """Every part once, in the registry's order, in an empty directory the caller removes."""
    began = time.perf_counter()
    found = {name: round(part.probe(directory), 6) for name, part in PARTS.items()}
    return found, time.perf_counter() - began


def due(since_last_s: float, last_cost_s: float) -> bool:
    """Keep the sentinel under its budget: probe again only when the time since the last
    probe is SPACING times what that probe cost."""
    return since_last_s * BUDGET >= last_cost_s
