"""image: a file system in an image file on the layer below, through a loop device
(FreeBSD's vnode-backed md)."""

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import ClassVar, Literal, TypeVar

from pydantic import field_validator, model_validator

from layerbench.content import worlds
from layerbench.core.errors import UserError
from layerbench.core.sizes import SizeText, format_size, parse_size
from layerbench.linux import procfs, system
from layerbench.linux.mounts import mount_of, mount_table, wait_loop_released
from layerbench.stacks.base import BuildContext, Exposed, Layer, LayerOptions, Placement, register

# Without these, ext4 initialises inode tables and the journal lazily, in a kernel
# thread that writes to the image during the timed runs.
_EXT4_EXTENDED = ("lazy_itable_init=0", "lazy_journal_init=0")


def ext4_mkfs_arguments(*extended: str) -> list[str]:
    """mkfs.ext4's arguments as this layer runs it, with more extended options (mke2fs takes
    only its last -E)."""
    return ["-F", "-q", "-E", ",".join((*_EXT4_EXTENDED, *extended))]


# mkfs's own arguments per file system, as this layer runs it (bench/run.py makes its images
# by hand the same way).
MKFS_ARGUMENTS = {
    "ext4": ext4_mkfs_arguments(),
    "xfs": ["-f", "-q"],
    "btrfs": ["-f", "-q"],
}


# The smallest image each mkfs accepts (xfsprogs 5.19 on: 300 MB; mkfs.btrfs: 114294784
# bytes): a smaller one fails every trial, so the plan is refused up front.
_MIN_SIZE = {"xfs": 300 * 1000**2, "btrfs": 114294784}


class ImageOptions(LayerOptions):
    fs: Literal["ext4", "xfs", "btrfs"] = "ext4"
    size: SizeText = "2G"
    mkfs_options: list[str] = []
    mount_options: list[str] = []
    direct_io: bool = False  # loop device reads/writes the image file with O_DIRECT
    preallocate: bool = False  # fallocate the image instead of a sparse file
    device: str | None = None  # a real block device instead of an image file (--allow-device)
    compress: str | None = None  # btrfs: compress=VALUE ("no", "lzo", "zlib[:1-9]", "zstd[:1-15]")
    data: Literal["ordered", "writeback", "journal"] | None = None  # ext4: the data= journaling mode
    journal: bool = True  # ext4: false makes it without a journal (mkfs -O ^has_journal)
    # The loop device's I/O scheduler (one of what its queue/scheduler offers), put back after.
    scheduler: Literal["none", "mq-deadline", "kyber", "bfq"] | None = None
    # The loop device's logical block size (losetup --sector-size); mkfs then runs on the
    # device, so the file system's blocks are at least that large.
    sector_size: Literal[512, 1024, 2048, 4096] | None = None

    @field_validator("compress")
    @classmethod
    def _compress(cls, value: str | None) -> str | None:
        if value is None:
            return None
        algorithm, _, level = value.partition(":")
        highest = {"zlib": 9, "zstd": 15}.get(algorithm)
        if algorithm in ("no", "lzo") and not level:
            return value
        if highest and (not level or (level.isdigit() and 1 <= int(level) <= highest)):
            return value
        raise ValueError(
            f'{value!r}: a btrfs compression is "no", "lzo", "zlib" or "zlib:1"-"zlib:9", '
            '"zstd" or "zstd:1"-"zstd:15"'
        )

    @model_validator(mode="after")
    def _for_its_fs(self) -> "ImageOptions":
        if self.compress is not None and self.fs != "btrfs":
            raise ValueError(f"compress: btrfs only (this image is {self.fs})")
        if self.device is not None and (self.scheduler or self.sector_size):
            raise ValueError("scheduler and sector_size set up the image's loop device; a device has none")
        if (self.data is not None or not self.journal) and self.fs != "ext4":
            raise ValueError(f"{'data' if self.data else 'journal'}: ext4 only (this image is {self.fs})")
        if self.data == "journal" and not self.journal:
            raise ValueError('data: "journal" needs the journal (journal = false drops it)')
        return self

    def mkfs_arguments(self) -> list[str]:
        """mkfs's arguments before the user's own mkfs_options."""
        return [*MKFS_ARGUMENTS[self.fs], *([] if self.journal else ["-O", "^has_journal"])]

    def fs_mount_options(self) -> list[str]:
        """The file system's mount options this layer's own keys add, then the user's."""
        own = [f"compress={self.compress}"] if self.compress else []
        own += [f"data={self.data}"] if self.data else []
        return [*own, *self.mount_options]

    @model_validator(mode="after")
    def _big_enough(self) -> "ImageOptions":
        smallest = _MIN_SIZE.get(self.fs)
        if self.device is None and smallest and parse_size(self.size) < smallest:
            raise ValueError(
                f"size: {self.size} is smaller than mkfs.{self.fs} accepts; at least {format_size(smallest)}"
            )
        return self


# The image kind's options, or those of a kind built on it (fscrypt's extend them).
ImageOptionsT = TypeVar("ImageOptionsT", bound=ImageOptions, covariant=True)


@register
class ImageLayer(Layer[ImageOptionsT]):
    kind = "image"
    # Declared, not inferred: inferred, it would be typed by its constructor, whose fields a
    # kind built on this one narrows (fscrypt's fs), and that kind's Options would not fit.
    Options: ClassVar[type[ImageOptions]] = ImageOptions
    summary = "a loop-mounted image file with ext4, xfs or btrfs (FreeBSD's md vnode)"
    tools = ("mount", "losetup")

    @classmethod
    def extra_tools(cls, options: object) -> tuple[str, ...]:
        fs = getattr(options, "fs", "ext4")
        return (f"mkfs.{fs}",)

    @classmethod
    def missing(cls, options: LayerOptions | None = None, *, guest: bool = False) -> list[str]:
        lacks = super().missing(options, guest=guest)
        scheduler = getattr(options, "scheduler", None)
        if scheduler and not guest and not procfs.kernel_has_scheduler(scheduler):
            offered = ", ".join(procfs.loop_schedulers() or [])
            lacks.append(
                f"the I/O scheduler {scheduler!r}, which this kernel lacks (a loop device offers {offered})"
            )
        return lacks

    def fs_size(self) -> int | None:
        return parse_size(self.options.size)

    def place(self, below: Placement) -> Placement:
        options = self.options
        size = parse_size(options.size)
        holder = f"{options.fs} image size={options.size}"
        if options.device is not None:
            return Placement(
                medium="device", capacity=None, holder=options.device, writable=not options.readonly
            )
        placed = below.bounded(size, holder)
        metadata = _ext4_metadata_bytes(size) if options.fs == "ext4" else 0
        if metadata and below.medium == "memory":
            placed = replace(placed, reserved_memory=placed.reserved_memory + metadata)
        elif metadata:
            placed = replace(placed, reserved_disk=placed.reserved_disk + metadata)
        if options.preallocate:
            if below.medium == "memory":
                placed = replace(placed, reserved_memory=placed.reserved_memory + size)
            else:
                placed = replace(placed, reserved_disk=placed.reserved_disk + size)
        return replace(placed, writable=not options.readonly)

    def refusal(self, allowed_devices: frozenset[str], force: bool) -> str | None:
        device = self.options.device
        if device is None:
            return None
        return device_refusal(device, allowed_devices, force)

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        if options.device is not None:
            with self._on_device(ctx, options) as exposed:
                yield exposed
            return
        size = parse_size(options.size)
        image = below.path / f"layer{self.index}.img"
        if not str(image).startswith(str(ctx.scratch.root) + "/"):
            raise UserError(f"refusing to make an image at {image}: outside the scratch root")
        target = ctx.subdir(f"L{self.index}-image")
        make_image(image, size, preallocate=options.preallocate)
        # A world on the layer below is copied in by mkfs (untimed), so a read-only image
        # holds it as the seed's md image held the installed world.
        populate = []
        if ctx.world and options.fs == "ext4" and worlds.visible(ctx.world, below.path):
            populate = ["-d", str(ctx.world)]
        loop_name = None
        try:
            with contextlib.ExitStack() as attached:
                # With a sector size the loop device is attached first and formatted itself;
                # otherwise mount -o loop attaches it (and detaches it when unmounted).
                source = str(image)
                if options.sector_size:
                    loop = ["--sector-size", str(options.sector_size)]
                    loop += ["--direct-io=on"] if options.direct_io else []
                    source = attached.enter_context(ctx.scratch.loop_device(image, loop))
                mkfs = [f"mkfs.{options.fs}", *options.mkfs_arguments(), *options.mkfs_options]
                system.run([*mkfs, *populate, source], timeout=1800)
                mount_options = [*([] if options.sector_size else ["loop"]), *options.fs_mount_options()]
                if options.readonly:
                    mount_options.append("ro")
                with ctx.scratch.mounted(source, target, fstype=options.fs, options=mount_options):
                    entry = mount_of(target)
                    loop_name = Path(entry.source).name
                    if options.direct_io and not options.sector_size:
                        system.run(["losetup", "--direct-io=on", entry.source])
                    line = f"{entry.line()} [{entry.source} -> {image}]"
                    lines = [line, *self._queue_lines(entry.source)]
                    queue = Path("/sys/block", Path(entry.source).name, "queue", "scheduler")
                    with (
                        ctx.scratch.setting(queue, options.scheduler)  # put back before the unmount
                        if options.scheduler
                        else contextlib.nullcontext()
                    ) as was:
                        if options.scheduler:
                            lines.append(f"{entry.source} scheduler {options.scheduler} (was {was})")
                        yield Exposed(path=target, mount_lines=lines, fs_size=size)
        finally:
            # The image lives on the layer below; remove it before that layer goes away.
            with contextlib.suppress(FileNotFoundError):
                image.unlink()
            # Its loop device goes by itself once unmounted, in the background: the trial's
            # teardown ends when it has, not after the process that ran it.
            if loop_name is not None and not ctx.scratch.hurry:
                wait_loop_released(loop_name, image)

    @staticmethod
    def _queue_lines(device: str) -> list[str]:
        """The loop device's logical block size, when it is not the usual 512 bytes."""
        size = Path("/sys/block", Path(device).name, "queue", "logical_block_size")
        with contextlib.suppress(OSError):
            if (found := size.read_text().strip()) != "512":
                return [f"{device} logical block size {found}"]
        return []

    @contextlib.contextmanager
    def _on_device(self, ctx: BuildContext, options: ImageOptions) -> Iterator[Exposed]:
        assert options.device is not None
        # The signature check was done once before the experiment: from then on the device is
        # ours, and the file system our previous trial left on it is no reason to stop.
        refusal = device_refusal(options.device, ctx.allowed_devices, force=True)
        if refusal:
            raise UserError(refusal)
        target = ctx.subdir(f"L{self.index}-device")
        system.run([f"mkfs.{options.fs}", *options.mkfs_arguments(), *options.mkfs_options, options.device])
        mount_options = [*options.fs_mount_options(), *(["ro"] if options.readonly else [])]
        with ctx.scratch.mounted(options.device, target, fstype=options.fs, options=mount_options):
            size = int(Path(f"/sys/class/block/{Path(options.device).resolve().name}/size").read_text()) * 512
            yield Exposed(path=target, mount_lines=[mount_of(target).line()], fs_size=size)


class DeviceFsOptions(LayerOptions):
    """The file system a block-device layer (dm-crypt, lvm-thin, md-raid1) makes on its device."""

    fs: Literal["ext4", "xfs", "btrfs"] = "ext4"
    mkfs_options: list[str] = []
    mount_options: list[str] = []

    @contextlib.contextmanager
    def made_and_mounted(self, ctx: BuildContext, device: str, target: Path) -> Iterator[str]:
        """mkfs on device, then mounted at target until the way out; yields the mount's line."""
        system.run([f"mkfs.{self.fs}", *MKFS_ARGUMENTS[self.fs], *self.mkfs_options, device], timeout=1800)
        options = [*self.mount_options, *(["ro"] if self.readonly else [])]
        with ctx.scratch.mounted(device, target, fstype=self.fs, options=options):
            yield mount_of(target).line()


@contextlib.contextmanager
def loop_image(ctx: BuildContext, image: Path, size: int) -> Iterator[str]:
    """A sparse image file of size bytes on the layer below, on a loop device (a block-device
    layer's disk); detached and removed on the way out. Yields the loop device."""
    if not image.is_relative_to(ctx.scratch.root):
        raise UserError(f"refusing to make an image at {image}: outside the scratch root")
    make_image(image, size, preallocate=False)
    try:
        with ctx.scratch.loop_device(image, []) as loop:
            yield loop
    finally:
        image.unlink(missing_ok=True)


def make_image(image: Path, size: int, *, preallocate: bool) -> None:
    with open(image, "wb") as handle:
        if preallocate:
            os.posix_fallocate(handle.fileno(), 0, size)
        else:
            handle.truncate(size)


def _ext4_metadata_bytes(size: int) -> int:
    """What mkfs.ext4 writes into a sparse image with lazy initialisation off: the inode
    tables (256 bytes per 16 KiB) and the journal (at most 1 GiB)."""
    return size // 64 + min(size // 48, 2**30)


def device_refusal(device: str, allowed: frozenset[str], force: bool) -> str | None:
    """A real block device is formatted only when named with --allow-device, and never
    while mounted or holding a file system signature, unless --force as well."""
    real = os.path.realpath(device)
    if not any(os.path.realpath(a) == real for a in allowed):
        return f"refusing to format {device}: name it with --allow-device {device}"
    if not Path(real).is_block_device():
        return f"refusing to format {device}: not a block device"
    name = Path(real).name
    if any(os.path.realpath(e.source) == real for e in mount_table()) or any(
        Path("/sys/class/block", name, "holders").glob("*")
    ):
        return f"refusing to format {device}: it is mounted or in use"
    signature = subprocess.run(
        ["blkid", "-p", "-o", "value", "-s", "TYPE", real], capture_output=True, text=True, check=False
    ).stdout.strip()
    if signature and not force:
        return f"refusing to format {device}: it holds a {signature} file system; add --force to erase it"
    return None
