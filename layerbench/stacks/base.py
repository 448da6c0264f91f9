"""The layer protocol, the registry of layer kinds, and building a whole stack.

A layer takes the path the layer below exposes and, as a context manager, exposes one
path itself. A stack is an ExitStack over its layers, bottom to top, starting from a
fresh directory on the scratch root's own file system.
"""

import contextlib
import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from layerbench.content import jail as jails
from layerbench.content import worlds
from layerbench.core import failpoints
from layerbench.core.errors import SetupError
from layerbench.linux import cgroups, mounts, procfs, system
from layerbench.scratch import Scratch


class LayerOptions(BaseModel):
    """Options every layer kind accepts."""

    model_config = ConfigDict(extra="forbid", strict=True)
    kind: str
    readonly: bool = False


# A layer kind's own options class: its methods then see that class's fields. Covariant, so
# that a layer of any kind is a Layer[LayerOptions] (the options are only read, never set).
OptionsT = TypeVar("OptionsT", bound=LayerOptions, covariant=True)


@dataclass
class Exposed:
    """What a built layer offers the layer above it."""

    path: Path
    mount_lines: list[str] = field(default_factory=list)
    helper_pids: list[int] = field(default_factory=list)
    fs_size: int | None = None  # bytes, when this layer made a file system
    standalone: bool = False  # keeps no data on the layers below (tmpfs)
    # Set by a layer that runs the layers above it and the workload somewhere else (a
    # guest): an object with run(request, host_devices, timeout) and describe().
    elsewhere: Any = None
    cgroup_procs: list[Path] = field(default_factory=list)  # the timed child joins these first
    # Read after each timed run: facts only this layer knows about it (a limits group's
    # peak memory), stored with the run.
    run_facts: list[Callable[[], dict[str, object]]] = field(default_factory=list)
    # Called once the workload is prepared, before the caches are dropped and the run is
    # timed (an LVM snapshot of what the preparation wrote); their facts are stored with the run.
    before_run: list[Callable[[], dict[str, object]]] = field(default_factory=list)
    # How an automounter's map mounts this layer's top again ("-fstype=nfs,vers=3 host:/path");
    # None: a bind of the top. netns: the network namespace a client of its server must join.
    automount_entry: str | None = None
    netns: Path | None = None


@dataclass(frozen=True)
class Placement:
    """Where the bytes written on a layer's top end up, worked out from the plan alone
    (before anything is built): so that a plan that cannot fit is refused up front."""

    medium: Literal["disk", "memory", "device"] = "disk"  # disk: the scratch root's file system
    capacity: int | None = None  # the most the top can hold; None: whatever is free on the disk
    holder: str = "the scratch root's file system"  # what sets the capacity, for messages
    writable: bool = True
    reserved_memory: int = 0  # taken from the host's memory whatever is written (a guest's RAM)
    reserved_disk: int = 0  # taken from the disk whatever is written (a preallocated image)

    def bounded(self, capacity: int, holder: str) -> "Placement":
        """The same medium, with a file system of this size on top."""
        if self.capacity is not None and self.capacity < capacity:
            return self  # a sparse image on a smaller file system: the smaller one fills first
        return replace(self, capacity=capacity, holder=holder)


@dataclass
class BuildContext:
    scratch: Scratch
    workdir: Path  # this trial's own directory in the scratch root
    allowed_devices: frozenset[str] = frozenset()  # block devices the user let us format
    force: bool = False  # format them even if they hold a file system
    world: Path | None = None  # the userland tree the stack exposes to a jail, if any

    def subdir(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir()
        return path


class Layer(ABC, Generic[OptionsT]):
    """One kind of layer. Subclasses set the class attributes and implement expose(); a
    kind is a Layer[ItsOptions], with Options = ItsOptions (what the plan's table is
    validated against)."""

    kind: ClassVar[str]
    Options: ClassVar[type[LayerOptions]] = LayerOptions
    summary: ClassVar[str] = ""
    tools: ClassVar[tuple[str, ...]] = ()  # external commands it runs
    filesystems: ClassVar[tuple[str, ...]] = ()  # kernel file systems it needs
    # Kernel modules it needs (as /sys/module names them); a vm layer's guest loads them at boot
    # (guest/kernel.py), so a layer above one can need what the host's kernel lacks.
    kernel_modules: ClassVar[tuple[str, ...]] = ()
    # It runs the layers above it elsewhere (a vm layer's guest): their kernel is not this one.
    hosts_layers_above: ClassVar[bool] = False
    # Its files live in memory pages (4 KiB each), not in a page cache of large folios: what
    # a run writes on it is held warm in small pages (warm_memory.py).
    small_pages: ClassVar[bool] = False
    # keep_stacks: a stack of this kind can serve the repetitions of a workload one after
    # another (False: it is built for each trial, as a vm layer's guest boots for each).
    keepable: ClassVar[bool] = True

    def fs_size(self) -> int | None:
        """Size of the file system this layer makes, if it makes one (known before building)."""
        return None

    def __init__(self, options: OptionsT, index: int) -> None:
        self.options: OptionsT = options
        self.index = index  # position in the stack, bottom = 0

    @classmethod
    def missing(cls, options: LayerOptions | None = None, *, guest: bool = False) -> list[str]:
        """What this host lacks for this layer, as install hints; empty if it can run. guest:
        the layer is built inside a vm layer's guest, which runs this host's programs on its
        own kernel: only the programs are this host's to check."""
        wanted = list(cls.tools) + list(cls.extra_tools(options))
        lacks = [
            f"{tool} (apt-get install {system.PACKAGE_OF_TOOL.get(tool, tool)})"
            for tool in wanted
            if system.tool_path(tool) is None
        ]
        if guest:
            return lacks
        lacks += [
            f"kernel file system {fs}" for fs in cls.filesystems if not procfs.kernel_has_filesystem(fs)
        ]
        lacks += [
            f"the kernel module {module}, which this host's kernel lacks (a layer above a vm layer is "
            "built in its guest, whose kernel has it)"
            for module in cls.kernel_modules
            if not procfs.kernel_has_module(module)
        ]
        return lacks

    @classmethod
    def only_in_a_guest_here(cls) -> bool:
        """This host's kernel lacks a module the kind needs: it is built only above a vm layer."""
        return not all(procfs.kernel_has_module(module) for module in cls.kernel_modules)

    @classmethod
    def extra_tools(cls, options: LayerOptions | None) -> tuple[str, ...]:
        return ()

    def place(self, below: Placement) -> Placement:
        """Where data written on this layer's top lands, given where the layer below puts it.
        The default is a passthrough (bind, FUSE, throttle): the layer below holds it."""
        return replace(below, writable=below.writable and not self.options.readonly)

    def refusal(self, allowed_devices: frozenset[str], force: bool) -> str | None:
        """Why this layer must not be built with these permissions; None if it may."""
        return None

    @abstractmethod
    def expose(self, ctx: BuildContext, below: Exposed) -> contextlib.AbstractContextManager[Exposed]:
        """Build on top of below; yield what this layer exposes; tear down on exit."""

    def describe(self) -> str:
        settings = self.options.model_dump(exclude={"kind"}, exclude_defaults=True)
        inner = ", ".join(f"{k}={v}" for k, v in settings.items())
        return f"{self.kind}({inner})" if inner else self.kind


LAYER_KINDS: dict[str, type[Layer[LayerOptions]]] = {}

LayerT = TypeVar("LayerT", bound=Layer[LayerOptions])


def register(cls: type[LayerT]) -> type[LayerT]:
    LAYER_KINDS[cls.kind] = cls
    return cls


def make_layers(options: list[LayerOptions]) -> list[Layer[LayerOptions]]:
    """A stack's layers from the plan's options, bottom (1) to top."""
    return [LAYER_KINDS[layer.kind](layer, index) for index, layer in enumerate(options, start=1)]


def load_kinds() -> dict[str, type[Layer[LayerOptions]]]:
    """Import every module of this package so each kind registers itself."""
    package = importlib.import_module("layerbench.stacks")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name != "base":
            importlib.import_module(f"layerbench.stacks.{info.name}")
    return LAYER_KINDS


@dataclass
class BuiltStack:
    top: Path
    layers: list[Exposed]
    jail: jails.Jail | None = None  # the chroot over the top, when the stack has a world
    parts: list[Layer[LayerOptions]] = field(default_factory=list)  # the layers built here, bottom to top
    rest: list[Layer[LayerOptions]] = field(default_factory=list)  # layers left to the `elsewhere` of the top
    helper_group: Path | None = None  # a cgroup v2 group holding every helper process

    @property
    def elsewhere(self) -> Any:
        return self.layers[-1].elsewhere

    @property
    def mount_lines(self) -> list[str]:
        lines = [line for exposed in self.layers for line in exposed.mount_lines]
        return lines + (self.jail.mount_lines if self.jail else [])

    @property
    def helper_pids(self) -> list[int]:
        return [pid for exposed in self.layers for pid in exposed.helper_pids]

    @property
    def cgroup_procs(self) -> list[Path]:
        return [procs for exposed in self.layers for procs in exposed.cgroup_procs]

    def run_facts(self) -> dict[str, object]:
        found: dict[str, object] = {}
        for exposed in self.layers:
            for read in exposed.run_facts:
                found |= read()
        return found

    def before_run(self) -> dict[str, object]:
        found: dict[str, object] = {}
        for exposed in self.layers:
            for step in exposed.before_run:
                found |= step()
        return found

    @property
    def fs_size(self) -> int | None:
        for exposed in reversed(self.layers):
            if exposed.fs_size is not None:
                return exposed.fs_size
        return None

    def durable_paths(self) -> list[Path]:
        """A path on each file system that holds the top's data, top first. A syncfs of the
        top alone is not enough: through a FUSE passthrough it is a no-op (bindfs has no
        syncfs), leaving the data dirty in the file system below."""
        found = self._data_paths()
        return found[:1] if failpoints.sync_top_only() else found

    def _data_paths(self) -> list[Path]:
        found: list[Path] = []
        for exposed in reversed(self.layers):
            found.append(exposed.path)
            if exposed.standalone:
                break
        return found

    def devices(self) -> list[str]:
        """Block devices that serve the stack's top, top first: down through the layers
        until one keeps its data elsewhere (a tmpfs holds it in memory)."""
        found = [device for path in self._data_paths() for device in mounts.devices_under(path)]
        return list(dict.fromkeys(found))


class _HelperGroup(contextlib.ExitStack):
    """A cgroup v2 group that the stack's helper processes (FUSE daemons, sshd and its
    sessions) are moved into once the stack is built: the kernel then counts their CPU in
    nanoseconds, threads that exit and children they fork included. Entered before the
    layers, so it is removed after every daemon has been stopped."""

    def __init__(self, scratch: Scratch, label: str) -> None:
        super().__init__()
        self.scratch, self.label = scratch, label

    def gather(self, pids: list[int]) -> Path | None:
        tree = cgroups.pressure_hierarchy()
        if not pids or tree is None:
            return None
        try:
            group = self.enter_context(self.scratch.cgroup(tree, self.label))
            cgroups.place_all(pids, group / "cgroup.procs")
        except SetupError:
            return None  # counted from each process's threads instead
        return group


@contextlib.contextmanager
def build_stack(ctx: BuildContext, layers: list[Layer[LayerOptions]]) -> Iterator[BuiltStack]:
    """Build layers bottom to top on a fresh base directory; tear down top to bottom.

    With a world, the base directory starts with the world in it (hard links into the
    cache: no extra copy on the disk), a layer that makes a new file system gets it copied
    in (an ext4 image at mkfs time), and a jail is laid out over the top. A layer that runs
    the rest elsewhere (a vm) leaves the layers above it unbuilt here."""
    with contextlib.ExitStack() as stack:
        helpers = stack.enter_context(_HelperGroup(ctx.scratch, f"{ctx.workdir.name}-helpers"))
        exposed = Exposed(path=ctx.subdir("base"))
        if ctx.world:
            worlds.copy_into(ctx.world, exposed.path, link=True)
        built = [exposed]
        done: list[Layer[LayerOptions]] = []
        for layer in layers:
            exposed = stack.enter_context(layer.expose(ctx, exposed))
            if ctx.world and not worlds.visible(ctx.world, exposed.path):
                worlds.copy_into(ctx.world, exposed.path)
            built.append(exposed)
            done.append(layer)
            if exposed.elsewhere is not None:
                break
        chroot = None
        if ctx.world and exposed.elsewhere is None:
            chroot = stack.enter_context(
                jails.built(ctx.scratch, ctx.subdir("jail"), ctx.world, exposed.path)
            )
        result = BuiltStack(top=exposed.path, layers=built, jail=chroot, parts=done, rest=layers[len(done) :])
        result.helper_group = helpers.gather(result.helper_pids)
        yield result
