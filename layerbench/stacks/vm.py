"""vm: a qemu guest. Its disk is an image file on the layer below (virtio); the layers
above this one and the workload run inside the guest, on the host's own programs (the
host's root shared read-only over 9p). The seed compared a native and a Xen kernel."""

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Literal

from pydantic import Field, field_validator, model_validator

from layerbench.core.errors import SetupError, UserError
from layerbench.core.sizes import SizeText, parse_size
from layerbench.guest import kernel, machine
from layerbench.linux import system
from layerbench.stacks.base import BuildContext, Exposed, Layer, LayerOptions, Placement, register

_MKFS_ARGS = {
    "ext4": ["-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0"],
    "xfs": ["-f", "-q"],
    "btrfs": ["-f", "-q"],
}


class VmOptions(LayerOptions):
    cpus: int = Field(default=1, ge=1, le=64)
    memory: SizeText = "1G"
    accel: Literal["auto", "kvm", "tcg"] = "auto"
    cache: Literal["none", "writeback", "writethrough", "directsync", "unsafe"] = "none"
    bus: Literal["virtio-blk", "virtio-scsi"] = "virtio-blk"
    disk_size: SizeText = "2G"
    fs: Literal["ext4", "xfs", "btrfs"] = "ext4"  # the guest disk's file system
    mkfs_options: list[str] = []
    # "9p": the workload (and the layers above) runs on a directory of the layer below shared
    # into the guest over virtio-9p, not on the guest's disk: the containers' host share.
    share: Literal["none", "9p"] = "none"
    msize: int = Field(default=512000, ge=8192, le=512000)  # 9p's largest message (the guest's cap)
    share_cache: Literal["none", "loose", "fscache", "mmap", "readahead"] = "none"  # 9p's cache=

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str) -> str:
        if parse_size(value) < 256 * 2**20:
            raise ValueError("the guest needs at least 256M of memory")
        return value

    @model_validator(mode="after")
    def _share_options(self) -> "VmOptions":
        if self.share == "none" and {"msize", "share_cache"} & self.model_fields_set:
            raise ValueError('msize and share_cache set up a 9p share: add share = "9p"')
        return self

    def share_options(self) -> str:
        return f"msize={self.msize},cache={self.share_cache}"

    @field_validator("readonly")
    @classmethod
    def _readonly(cls, value: bool) -> bool:
        if value:
            raise ValueError("a vm layer cannot be read-only; put a read-only layer above it")
        return value


@register
class VmLayer(Layer[VmOptions]):
    kind = "vm"
    Options = VmOptions
    summary = "a qemu guest (microvm) on an image file of the layer below; layers above run inside"
    tools = ("qemu-system-x86_64", "busybox", "apt-get", "dpkg")
    keepable = False  # each trial boots a fresh guest
    hosts_layers_above = True

    @classmethod
    def extra_tools(cls, options: object) -> tuple[str, ...]:
        return (f"mkfs.{getattr(options, 'fs', 'ext4')}",)

    @classmethod
    def missing(cls, options: LayerOptions | None = None, *, guest: bool = False) -> list[str]:
        lacks = super().missing(options, guest=guest)
        if lacks or not isinstance(options, VmOptions):  # None: the kind alone (layerbench list)
            return lacks
        problem = machine.unseen_in_guest()
        if problem:
            return [problem]
        # Before the experiment starts: fetch the guest kernel, build the initramfs and
        # settle the accelerator, so none of it happens during a trial.
        try:
            kernel.guest_kernel()
            machine.resolve_accel(options.accel)
        except (UserError, SetupError) as exc:
            return [str(exc)]
        return []

    def place(self, below: Placement) -> Placement:
        """The guest's disk is an image on the layer below (and so is a 9p share's directory);
        its RAM comes from the host."""
        options = self.options
        if options.share == "9p":
            placed = below
        else:
            placed = below.bounded(parse_size(options.disk_size), f"vm disk_size={options.disk_size}")
        return replace(
            placed, writable=True, reserved_memory=placed.reserved_memory + parse_size(options.memory)
        )

    def fs_size(self) -> int | None:
        return None if self.options.share == "9p" else parse_size(self.options.disk_size)

    def describe(self) -> str:
        options = self.options
        accel, _ = machine.resolve_accel(options.accel)
        settings = options.model_dump(exclude={"kind", "accel"}, exclude_defaults=True)
        inner = ", ".join([*(f"{k}={v}" for k, v in settings.items()), f"accel={accel}"])
        return f"vm({inner})"

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        size = parse_size(options.disk_size)
        guest = kernel.guest_kernel()
        accel, why = machine.resolve_accel(options.accel)
        image = below.path / f"layer{self.index}-vm.img"
        share = ctx.subdir(f"L{self.index}-vm-share")
        disk_mount = ctx.subdir(f"L{self.index}-vm")  # where the guest mounts its disk
        logs = ctx.subdir(f"L{self.index}-vm-log")
        work = None
        if options.share == "9p":
            work = below.path / f"layer{self.index}-9p"  # on the layer below, as the disk image is
            work.mkdir()
        try:
            with open(image, "wb") as handle:
                handle.truncate(size)
            system.run([f"mkfs.{options.fs}", *_MKFS_ARGS[options.fs], *options.mkfs_options, str(image)])
            spec = machine.MachineSpec(
                cpus=options.cpus,
                memory_mib=parse_size(options.memory) // 2**20,
                accel=accel,
                disk_image=image,
                disk_cache=options.cache,
                disk_bus=options.bus,
                share=share,
                console=logs / "console.log",
                work_share=work,
                work_share_options=options.share_options() if work else "",
            )
            trial = machine.GuestTrial(
                ctx.scratch,
                spec,
                guest,
                disk_mount=disk_mount,
                disk_fs=options.fs,
                disk_size=size,
                accel_why=why,
            )
            yield Exposed(
                path=work or disk_mount,
                mount_lines=[trial.describe()],
                fs_size=None if work else size,
                elsewhere=trial,
            )
        finally:
            with contextlib.suppress(FileNotFoundError):
                image.unlink()
