"""image: a file system in an image file on the layer below, through a loop device
(FreeBSD's vnode-backed md)."""

import contextlib
import os
from collections.abc import Iterator
from typing import Literal

from pydantic import field_validator

from layerbench import system
from layerbench.mounts import mount_of
from layerbench.sizes import parse_size
from layerbench.stacks.base import BuildContext, Exposed, Layer, LayerOptions, register

# Without these, ext4 initialises inode tables and the journal lazily, in a kernel
# thread that writes to the image during the timed runs.
_EXT4_DEFAULTS = ["-E", "lazy_itable_init=0,lazy_journal_init=0"]
_MKFS_ARGS = {
    "ext4": ["-F", "-q", *_EXT4_DEFAULTS],
    "xfs": ["-f", "-q"],
    "btrfs": ["-f", "-q"],
}


class ImageOptions(LayerOptions):
    fs: Literal["ext4", "xfs", "btrfs"] = "ext4"
    size: str = "2G"
    mkfs_options: list[str] = []
    mount_options: list[str] = []
    direct_io: bool = False  # loop device reads/writes the image file with O_DIRECT
    preallocate: bool = False  # fallocate the image instead of a sparse file

    @field_validator("size")
    @classmethod
    def _size(cls, value: str) -> str:
        parse_size(value)
        return value


@register
class ImageLayer(Layer):
    kind = "image"
    Options = ImageOptions
    summary = "a loop-mounted image file with ext4, xfs or btrfs (FreeBSD's md vnode)"
    tools = ("mount", "losetup")

    @classmethod
    def extra_tools(cls, options: object) -> tuple[str, ...]:
        fs = getattr(options, "fs", "ext4")
        return (f"mkfs.{fs}",)

    def fs_size(self) -> int | None:
        return parse_size(self.options.size)  # type: ignore[attr-defined]

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options: ImageOptions = self.options  # type: ignore[assignment]
        size = parse_size(options.size)
        image = below.path / f"layer{self.index}.img"
        target = ctx.subdir(f"L{self.index}-image")
        with open(image, "wb") as handle:
            if options.preallocate:
                os.posix_fallocate(handle.fileno(), 0, size)
            else:
                handle.truncate(size)
        try:
            system.run([f"mkfs.{options.fs}", *_MKFS_ARGS[options.fs], *options.mkfs_options, str(image)])
            # mount -o loop sets the loop device to detach itself when unmounted.
            mount_options = ["loop", *options.mount_options]
            if options.readonly:
                mount_options.append("ro")
            with ctx.scratch.mounted(str(image), target, fstype=options.fs, options=mount_options):
                entry = mount_of(target)
                if options.direct_io:
                    system.run(["losetup", "--direct-io=on", entry.source])
                line = f"{entry.line()} [{entry.source} -> {image}]"
                yield Exposed(path=target, mount_lines=[line], fs_size=size)
        finally:
            # The image lives on the layer below; remove it before that layer goes away.
            with contextlib.suppress(FileNotFoundError):
                image.unlink()
