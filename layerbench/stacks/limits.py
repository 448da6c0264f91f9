"""limits: fewer CPUs and less memory for the workload, as a guest would have, on the host
side: the timed run joins a cpuset and a memory control group (cgroup v2 cpuset.cpus and
memory.max, or v1's cpuset and memory trees). A stack's `limits = { cpus = 1, memory =
"3.5G" }` is this layer on top of its others, so that a control stack (native, 1 CPU,
3.5 GB) tells the hypervisor's cost from the resources' in one plan.

What is limited is the workload's own processes: the page cache they fill counts against
the memory limit (as in a guest with that much memory), but kernel threads (writeback,
loop workers) run outside the groups, on every CPU."""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from layerbench.core.errors import SetupError
from layerbench.core.facts import Fact, declare
from layerbench.core.sizes import SizeText, format_size, parse_size
from layerbench.linux import cgroups
from layerbench.stacks.base import BuildContext, Exposed, Layer, LayerOptions, register

LIMITS_CPUS = Fact("limits_cpus", "before", "how many CPUs the limits layer gave the run", int)
LIMITS_MEMORY_BYTES = Fact("limits_memory_bytes", "before", "the limits layer's memory limit", int)
LIMITS_MEMORY_PEAK_BYTES = Fact(
    "limits_memory_peak_bytes",
    "during",
    "the run's memory peak in the limits layer's group (its page cache included)",
    int,
)
declare(LIMITS_CPUS, LIMITS_MEMORY_BYTES, LIMITS_MEMORY_PEAK_BYTES)

_SMALLEST_MEMORY = 64 * 2**20  # below this the workload's own tools do not start


class LimitsOptions(LayerOptions):
    cpus: int | None = Field(default=None, ge=1, le=4096)  # how many: the lowest-numbered CPUs
    cpu_list: str | None = None  # or exactly these, in cpuset syntax: "1", "0,2", "2-3"
    memory: SizeText | None = None  # the most the workload's processes and their page cache take

    @field_validator("cpu_list")
    @classmethod
    def _cpu_list(cls, value: str | None) -> str | None:
        if value is not None:
            parse_cpu_list(value)
        return value

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str | None) -> str | None:
        if value is not None and parse_size(value) < _SMALLEST_MEMORY:
            raise ValueError(f"memory {value!r}: at least {format_size(_SMALLEST_MEMORY)}")
        return value

    @model_validator(mode="after")
    def _something(self) -> "LimitsOptions":
        if self.readonly:
            raise ValueError("readonly does not apply to limits; set it on a layer below")
        if self.cpus is not None and self.cpu_list is not None:
            raise ValueError("give cpus (how many) or cpu_list (which), not both")
        if self.cpus is None and self.cpu_list is None and self.memory is None:
            raise ValueError("give at least one of cpus, cpu_list, memory")
        return self

    def chosen_cpus(self) -> list[int]:
        """The CPUs the workload gets, given the host's online ones."""
        if self.cpu_list is not None:
            return parse_cpu_list(self.cpu_list)
        online = sorted(os.sched_getaffinity(0))
        return online[: self.cpus] if self.cpus is not None else online


def parse_cpu_list(text: str) -> list[int]:
    """ "0-2,5" -> [0, 1, 2, 5]; ValueError naming what is wrong."""
    found: set[int] = set()
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if not low.isdigit() or (high and not high.isdigit()) or (high and int(high) < int(low)):
            raise ValueError(f"cpu_list {text!r}: CPU numbers and ranges like '0', '0,2', '1-3'")
        found.update(range(int(low), int(high or low) + 1))
    return sorted(found)


def _cpu_text(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus)


def _controller(name: str) -> cgroups.Hierarchy | None:
    """Where the controller lives: a v2 tree that has it, else its v1 tree."""
    for fstype, point, options in cgroups.mounted_trees():
        if fstype == "cgroup2":
            with contextlib.suppress(OSError):
                if name in (point / "cgroup.controllers").read_text().split():
                    return cgroups.Hierarchy(2, point, io=False)
        elif name in options.split(","):
            return cgroups.Hierarchy(1, point, io=False)
    return None


@register
class LimitsLayer(Layer[LimitsOptions]):
    kind = "limits"
    Options = LimitsOptions
    summary = "fewer CPUs and less memory for the workload (a cpuset and a memory control group)"

    @classmethod
    def missing(cls, options: LayerOptions | None = None, *, guest: bool = False) -> list[str]:
        lacks: list[str] = []
        if guest:
            return lacks  # the guest's control groups are its own
        wanted = options if isinstance(options, LimitsOptions) else None
        if wanted is None or wanted.cpus or wanted.cpu_list:
            if _controller("cpuset") is None:
                lacks.append("a cpuset control group controller (mount the cgroup file system)")
            elif wanted is not None:
                online = os.sched_getaffinity(0)
                if wanted.cpus and wanted.cpus > len(online):
                    lacks.append(f"{wanted.cpus} CPUs (this host gives layerbench {len(online)})")
                if wanted.cpu_list and not set(wanted.chosen_cpus()) <= online:
                    lacks.append(f"CPUs {wanted.cpu_list} (this host has {_cpu_text(sorted(online))})")
        if (wanted is None or wanted.memory) and _controller("memory") is None:
            lacks.append("a memory control group controller (mount the cgroup file system)")
        return lacks

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        if lacks := self.missing(options):
            raise SetupError(f"limits: needs {lacks[0]}")
        label = f"{ctx.workdir.name}-L{self.index}"
        with contextlib.ExitStack() as groups:
            lines: list[str] = []
            procs: list[Path] = []
            facts: dict[str, object] = {}
            if options.cpus or options.cpu_list:
                hierarchy = _controller("cpuset")
                assert hierarchy is not None
                group = groups.enter_context(ctx.scratch.cgroup(hierarchy, f"{label}-cpuset"))
                lines.append(_set_cpus(hierarchy, group, options.chosen_cpus()))
                procs.append(group / "cgroup.procs")
                facts[LIMITS_CPUS.key] = len(options.chosen_cpus())
            if options.memory:
                hierarchy = _controller("memory")
                assert hierarchy is not None
                group = groups.enter_context(ctx.scratch.cgroup(hierarchy, f"{label}-memory"))
                lines.append(_set_memory(hierarchy, group, parse_size(options.memory)))
                procs.append(group / "cgroup.procs")
                facts[LIMITS_MEMORY_BYTES.key] = parse_size(options.memory)
                peak = group / ("memory.peak" if hierarchy.version == 2 else "memory.max_usage_in_bytes")
            else:
                peak = None

            def run_facts() -> dict[str, object]:
                # The group is new with the stack, and only the timed run is ever in it: its
                # peak is the run's (the page cache it filled included).
                found = dict(facts)
                if peak is not None:
                    with contextlib.suppress(OSError, ValueError):
                        found[LIMITS_MEMORY_PEAK_BYTES.key] = int(peak.read_text())
                return found

            yield Exposed(path=below.path, mount_lines=lines, cgroup_procs=procs, run_facts=[run_facts])


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value + "\n")
    except OSError as exc:
        raise SetupError(f"limits: cannot write {value!r} to {path}: {exc.strerror}") from None


def _delegate(hierarchy: cgroups.Hierarchy, controller: str) -> None:
    """cgroup v2 gives a controller to children only when each parent delegates it."""
    for directory in (hierarchy.mount_point, hierarchy.parent):
        control = directory / "cgroup.subtree_control"
        if controller not in control.read_text().split():
            _write(control, f"+{controller}")


def _set_cpus(hierarchy: cgroups.Hierarchy, group: Path, cpus: list[int]) -> str:
    text = _cpu_text(cpus)
    if hierarchy.version == 2:
        _delegate(hierarchy, "cpuset")
    else:
        # A v1 cpuset starts empty, and a child takes only what its parent has: the shared
        # parent gets the root's CPUs and memory nodes first.
        for key in ("cpuset.cpus", "cpuset.mems"):
            if not (hierarchy.parent / key).read_text().strip():
                _write(hierarchy.parent / key, (hierarchy.mount_point / key).read_text().strip())
        _write(group / "cpuset.mems", (hierarchy.parent / "cpuset.mems").read_text().strip())
    _write(group / "cpuset.cpus", text)
    return f"limits: CPUs {text} ({len(cpus)}) for the workload (cgroup v{hierarchy.version} {group})"


def _set_memory(hierarchy: cgroups.Hierarchy, group: Path, size: int) -> str:
    if hierarchy.version == 2:
        _delegate(hierarchy, "memory")
        _write(group / "memory.max", str(size))
    else:
        _write(group / "memory.limit_in_bytes", str(size))
    where = f"cgroup v{hierarchy.version} {group}"
    return f"limits: memory {format_size(size)} for the workload and its page cache ({where})"
