"""The workload protocol and the registry of workload kinds.

A workload prepares its target untimed, then hands back the command of the timed run
and how much work that run does (bytes written, files created) for the throughput.
"""

import contextlib
import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from layerbench.content.archives import Archive
from layerbench.core.runs import RunRecord
from layerbench.linux import system
from layerbench.stacks.base import BuildContext, BuiltStack


class WorkloadOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    kind: str
    timeout: float | None = Field(default=None, gt=0, description="seconds before a run is killed")
    trace: Literal["block"] | None = Field(
        default=None, description='"block": a block-request latency histogram per device (bpftrace)'
    )
    keep_stack: bool = Field(
        default=False,
        description="build each stack once for this workload and run its repetitions on it, each "
        "after what the run before added was removed (less untimed work; the report says so)",
    )


# A workload kind's own options class: its methods then see that class's fields. Covariant,
# so that a workload of any kind is a Workload[WorkloadOptions] (the options are only read).
OptionsT = TypeVar("OptionsT", bound=WorkloadOptions, covariant=True)


@dataclass
class Prepared:
    """The timed run of a trial: argv run in cwd, and the work it does."""

    argv: list[str]
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)
    units: float | None = None  # amount of work, for throughput
    unit: str | None = None  # "bytes" or "files"
    facts: dict[str, object] = field(default_factory=dict)  # e.g. fill bytes, for the record
    # Values of registry metrics only the workload knows (metrics.reported()), set by after_run.
    metrics: dict[str, float] = field(default_factory=dict)
    # What only the workload can say about a failed run (fio's per-job error), set by after_run.
    failure: str | None = None
    drop_caches: bool = True  # False: the run starts with warm caches (written back, not dropped)
    # Bytes the timed run claims are durable when it ends (its fsync or syncfs); checked
    # against the stack's bottom device (see durability.py). None: it claims nothing.
    durable_bytes: int | None = None
    # Called after the timed run, for what only the run knows (cycles done, latencies):
    # it may update units and facts.
    after_run: Callable[["Prepared"], None] | None = None

    def collect(self) -> None:
        if self.after_run is not None:
            self.after_run(self)

    def again(self) -> "Prepared":
        """The same run once more on its kept stack: what a run collects starts afresh."""
        return replace(self, facts=dict(self.facts), metrics={}, failure=None)


@dataclass(frozen=True)
class LatencyCdf:
    """One plot: per stack, latencies in microseconds and the share completed within each."""

    name: str  # the figure's element id
    title: str
    lines: dict[str, tuple[list[float], list[float]]]


class Workload(ABC, Generic[OptionsT]):
    """One kind of workload: a Workload[ItsOptions], with Options = ItsOptions (what the
    plan's table is validated against)."""

    kind: ClassVar[str]
    Options: ClassVar[type[WorkloadOptions]] = WorkloadOptions
    summary: ClassVar[str] = ""
    tools: ClassVar[tuple[str, ...]] = ()
    writes: ClassVar[bool] = False  # its timed run writes onto the stack's top (refused on a read-only one)
    # The metrics a user of this kind reads first: each one's comparison leads the workload's
    # part of the report, in this order (a fio job: IOPS and latency before elapsed time).
    headline_metrics: ClassVar[tuple[str, ...]] = ("wall_s",)
    needs_world: ClassVar[bool] = False  # runs in a chroot: every stack of the plan needs a world
    # keep_stacks: its repetitions can run one after another on one built stack, prepared
    # once, each after what the run before it added at the stack's top was removed.
    reusable: ClassVar[bool] = False
    # The smallest file system any stack of the plan makes: a fractional fill on a stack that
    # sits on the scratch root's own file system writes this much (set by make_workloads).
    reference_fs_size: int | None = None

    def __init__(self, options: OptionsT, name: str) -> None:
        self.options: OptionsT = options
        self.name = name

    @property
    def writes_onto_top(self) -> bool:
        """Whether this workload, with its options, writes onto the stack's top."""
        return self.writes

    @classmethod
    def missing(cls, options: WorkloadOptions | None = None) -> list[str]:
        return [
            f"{tool} (apt-get install {system.PACKAGE_OF_TOOL.get(tool, tool)})"
            for tool in (*cls.tools, *cls.extra_tools(options))
            if system.tool_path(tool) is None
        ]

    @classmethod
    def extra_tools(cls, options: WorkloadOptions | None) -> tuple[str, ...]:
        """Commands these options need besides `tools`."""
        return ()

    @classmethod
    def kernel_modules_for(cls, options: WorkloadOptions | None) -> tuple[str, ...]:
        """Kernel modules these options need (as /sys/module names them); a vm layer's guest
        loads them at boot."""
        return ()

    def data_bytes(self, capacity: int | None, reference: int | None) -> int:
        """An upper estimate of the bytes a trial puts on the stack's top (prepare and run),
        known from the options alone. capacity: what the top holds, if bounded; reference:
        the smallest file system any stack of the plan makes. Unknown work counts 0."""
        return 0

    def run_memory_bytes(self) -> int:
        """Memory the timed run takes fresh (the page cache or tmpfs pages of what it puts on
        the top): held warm for it where the kernel hands free memory back (warm_memory.py)."""
        return self.data_bytes(None, self.reference_fs_size)

    def staging_bytes(self) -> int:
        """Bytes of memory a trial holds besides the stack (a staging tmpfs)."""
        return 0

    def fetch(self) -> None:
        """Once per experiment, before anything is stored: download or pack what the runs
        need (untimed). Most workloads need nothing."""

    def packed(self) -> Archive | None:
        """A tree fetch() packed on this host for the runs to unpack; a guest is handed it."""
        return None

    def use_packed(self, archive: Archive) -> None:
        """Take the tree packed on the host (seen read-only here) instead of packing it again."""

    @abstractmethod
    def prepare(self, ctx: BuildContext, stack: BuiltStack, resources: contextlib.ExitStack) -> Prepared:
        """Untimed: set up the target on the stack's top; return the timed command.

        Anything that must outlive this call (a staging tmpfs) is entered on resources,
        which the trial closes after the run."""

    @classmethod
    def details(cls, runs: dict[str, list[RunRecord]]) -> tuple[list[str], list[list[str]]] | None:
        """An extra table for the reports (header, rows) from the runs' facts, given the
        measured runs of each stack; None when the kind has nothing beyond the counters."""
        return None

    @classmethod
    def latency_cdfs(cls, workload: str, runs: dict[str, list[RunRecord]]) -> list[LatencyCdf]:
        """Latency distributions the kind measured, for the HTML report's CDF plots, from the
        measured runs of each stack; none by default."""
        return []

    @classmethod
    def notes(cls, runs: dict[str, list[RunRecord]]) -> list[str]:
        """Lines for the reports' warnings (e.g. error texts kept in the facts)."""
        return []

    def describe(self) -> str:
        settings = self.options.model_dump(exclude={"kind"}, exclude_defaults=True)
        inner = ", ".join(f"{k}={v}" for k, v in settings.items())
        return f"{self.kind}({inner})" if inner else self.kind


WORKLOAD_KINDS: dict[str, type[Workload[WorkloadOptions]]] = {}

WorkloadT = TypeVar("WorkloadT", bound=Workload[WorkloadOptions])


def register(cls: type[WorkloadT]) -> type[WorkloadT]:
    WORKLOAD_KINDS[cls.kind] = cls
    return cls


def make_workloads(
    options: dict[str, WorkloadOptions], reference_fs_size: int | None
) -> dict[str, Workload[WorkloadOptions]]:
    """The plan's workloads, each told the smallest file system of the plan's stacks."""
    workloads = {name: WORKLOAD_KINDS[body.kind](body, name) for name, body in options.items()}
    for workload in workloads.values():
        workload.reference_fs_size = reference_fs_size
    return workloads


def load_kinds() -> dict[str, type[Workload[WorkloadOptions]]]:
    package = importlib.import_module("layerbench.workloads")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name != "base" and not info.name.startswith("_"):
            importlib.import_module(f"layerbench.workloads.{info.name}")
    return WORKLOAD_KINDS
