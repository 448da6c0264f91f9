"""squashfs and erofs: a read-only compressed image of the content below, packed untimed
with mksquashfs or mkfs.erofs and loop-mounted read-only (the container-image and snap
layers).

What is packed: the layer below's tree (with a world, the world is in it), or, with
`content = "builtin:NAME"` or a tar archive, that tree alone, unpacked untimed into a
directory of the trial first. The image file lives on the layer below, as an image
layer's does, and is deleted at teardown."""

import contextlib
import shutil
from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import ClassVar, Literal, TypeVar

from pydantic import field_validator, model_validator

from layerbench.content.archives import archive_estimate, check_spec, resolve, unpack
from layerbench.core.sizes import SizeText, parse_size
from layerbench.linux import system
from layerbench.linux.mounts import mount_of
from layerbench.stacks.base import BuildContext, Exposed, Layer, LayerOptions, Placement, register


class PackedOptions(LayerOptions):
    content: str | None = None  # "builtin:NAME" or a tar archive; None: the layer below's tree

    @field_validator("content")
    @classmethod
    def _content(cls, value: str | None) -> str | None:
        return None if value is None else check_spec(value, what="tree")
        if not Path(value).is_file():
            raise ValueError(f"no such archive file {value!r}; give a tar archive or builtin:NAME")
        return value


# compressor -> (lowest, highest) level, or None where mksquashfs takes no level
_SQUASHFS_LEVELS: dict[str, tuple[int, int] | None] = {
    "gzip": (1, 9),
    "lzo": (1, 9),
    "lz4": None,
    "xz": None,
    "zstd": (1, 22),
}


class SquashfsOptions(PackedOptions):
    compressor: Literal["gzip", "lzo", "lz4", "xz", "zstd"] = "zstd"
    level: int | None = None
    block_size: SizeText = "128K"  # 4K to 1M, a power of two

    @model_validator(mode="after")
    def _level(self) -> "SquashfsOptions":
        _check_level(self.compressor, self.level, _SQUASHFS_LEVELS)
        size = parse_size(self.block_size)
        if size < 4096 or size > 2**20 or size & (size - 1):
            raise ValueError(f"block_size {self.block_size!r}: a power of two from 4K to 1M")
        return self


_EROFS_LEVELS: dict[str, tuple[int, int] | None] = {"none": None, "lz4": None, "lz4hc": (0, 12)}


class ErofsOptions(PackedOptions):
    compressor: Literal["none", "lz4", "lz4hc"] = "lz4"
    level: int | None = None
    cluster_size: SizeText | None = None  # the compressed physical cluster (-C); 4K steps

    @model_validator(mode="after")
    def _level(self) -> "ErofsOptions":
        _check_level(self.compressor, self.level, _EROFS_LEVELS)
        if self.cluster_size is not None and parse_size(self.cluster_size) % 4096:
            raise ValueError(f"cluster_size {self.cluster_size!r}: a multiple of 4K")
        return self


def _check_level(compressor: str, level: int | None, levels: dict[str, tuple[int, int] | None]) -> None:
    if level is None:
        return
    bounds = levels[compressor]
    if bounds is None:
        takes = ", ".join(name for name, b in levels.items() if b) or "none"
        raise ValueError(f"compressor {compressor} takes no level (those that do: {takes})")
    if not bounds[0] <= level <= bounds[1]:
        raise ValueError(f"level {level} for {compressor}: valid {bounds[0]} to {bounds[1]}")


# A packed kind's options: squashfs's, erofs's, or those of a kind that extends them.
PackedOptionsT = TypeVar("PackedOptionsT", bound=PackedOptions, covariant=True)
SquashfsOptionsT = TypeVar("SquashfsOptionsT", bound=SquashfsOptions, covariant=True)


class PackedImage(Layer[PackedOptionsT]):
    """An image packed untimed on the layer below and served read-only, by a loop mount or
    by a FUSE daemon (squashfuse): where its data lands, and the command that packs it."""

    def place(self, below: Placement) -> Placement:
        options = self.options
        # The image sits on the layer below; its top takes no writes at all.
        packed = archive_estimate(options.content) if options.content else 0
        return replace(below, writable=False, reserved_disk=below.reserved_disk + packed)

    @abstractmethod
    def pack_command(self, source: Path, image: Path) -> list[str]:
        """The command that packs the tree at source into the image file."""


class _Packed(PackedImage[PackedOptionsT]):
    """The shared build: pack a tree into an image on the layer below, loop-mount it ro."""

    suffix: ClassVar[str]

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        source = _unpacked(ctx, options.content, self.index) if options.content else below.path
        image = below.path / f"layer{self.index}.{self.suffix}"
        target = ctx.subdir(f"L{self.index}-{self.kind}")
        try:
            system.run(self.pack_command(source, image), timeout=3600)
            if options.content:
                shutil.rmtree(source)  # what is packed is in the image now
            with ctx.scratch.mounted(str(image), target, fstype=self.kind, options=["loop", "ro"]):
                entry = mount_of(target)
                size = image.stat().st_size
                yield Exposed(
                    path=target, mount_lines=[f"{entry.line()} [{entry.source} -> {image}, {size} bytes]"]
                )
        finally:
            with contextlib.suppress(FileNotFoundError):
                image.unlink()


def _unpacked(ctx: BuildContext, content: str, index: int) -> Path:
    directory = ctx.subdir(f"L{index}-content")
    unpack(resolve(content), directory)
    return directory


class SquashfsImage(PackedImage[SquashfsOptionsT]):
    """A squashfs image packed by mksquashfs, for the kernel's squashfs and squashfuse alike."""

    def pack_command(self, source: Path, image: Path) -> list[str]:
        options = self.options
        level = ["-Xcompression-level", str(options.level)] if options.level is not None else []
        return [
            "mksquashfs", str(source), str(image), "-noappend", "-quiet", "-no-progress",
            "-comp", options.compressor, *level, "-b", str(parse_size(options.block_size)),
            "-e", image.name,
        ]  # fmt: skip


@register
class SquashfsLayer(_Packed[SquashfsOptions], SquashfsImage[SquashfsOptions]):
    kind = "squashfs"
    Options = SquashfsOptions
    summary = "a read-only squashfs image (mksquashfs) of the content below, loop-mounted"
    tools = ("mksquashfs", "mount", "tar")
    filesystems = ("squashfs",)
    suffix = "sqfs"


@register
class ErofsLayer(_Packed[ErofsOptions]):
    kind = "erofs"
    Options = ErofsOptions
    summary = "a read-only erofs image (mkfs.erofs) of the content below, loop-mounted"
    tools = ("mkfs.erofs", "mount", "tar")
    filesystems = ("erofs",)
    suffix = "erofs"

    def pack_command(self, source: Path, image: Path) -> list[str]:
        options = self.options
        compress = []
        if options.compressor != "none":
            level = f",{options.level}" if options.level is not None else ""
            compress = [f"-z{options.compressor}{level}"]
        cluster = [f"-C{parse_size(options.cluster_size)}"] if options.cluster_size else []
        return [
            "mkfs.erofs",
            "--quiet",
            *compress,
            *cluster,
            f"--exclude-path={image}",
            str(image),
            str(source),
        ]
