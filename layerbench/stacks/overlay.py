"""overlay: overlayfs with the layer below as its lower directory."""

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Literal

from layerbench.core.sizes import parse_size
from layerbench.linux.mounts import mount_of
from layerbench.stacks.base import BuildContext, Exposed, Layer, LayerOptions, Placement, register


class OverlayOptions(LayerOptions):
    upper: Literal["disk", "tmpfs"] = "disk"
    upper_size: str = "2G"  # only for upper = "tmpfs"
    mount_options: list[str] = []  # e.g. ["metacopy=on", "redirect_dir=on"]


def upper_dirs(
    ctx: BuildContext, name: str, options: OverlayOptions, stack: contextlib.ExitStack
) -> tuple[Path, Path, list[str]]:
    """An overlay's upper and work directories, on a tmpfs of their own or in the trial's
    directory; and the mount line of that tmpfs. Shared with fuse-overlayfs."""
    upper_fs = ctx.subdir(f"{name}-upperfs")
    lines = []
    if options.upper == "tmpfs":
        stack.enter_context(
            ctx.scratch.mounted(
                "layerbench", upper_fs, fstype="tmpfs", options=[f"size={options.upper_size}"]
            )
        )
        lines.append(mount_of(upper_fs).line())
    (upper_fs / "upper").mkdir()
    (upper_fs / "work").mkdir()
    return upper_fs / "upper", upper_fs / "work", lines


class OverlayPlacement(Layer[OverlayOptions]):
    """Where an overlay puts new data, whoever serves it (the kernel's overlayfs or
    fuse-overlayfs): the same upper and lower options, the same upper directory."""

    def place(self, below: Placement) -> Placement:
        """New data goes to the upper directory: a tmpfs of its own, or the trial's directory
        on the scratch root's file system."""
        options = self.options
        if options.readonly:
            return replace(below, writable=False)
        if options.upper == "tmpfs":
            upper = Placement(
                medium="memory",
                capacity=parse_size(options.upper_size),
                holder=f"overlay upper tmpfs size={options.upper_size}",
            )
        else:
            upper = Placement(
                medium="disk", holder="the overlay's upper dir on the scratch root's file system"
            )
        return replace(upper, reserved_memory=below.reserved_memory, reserved_disk=below.reserved_disk)


@register
class OverlayLayer(OverlayPlacement):
    kind = "overlay"
    Options = OverlayOptions
    summary = "overlayfs: the layer below as lower dir, upper on disk or tmpfs"
    tools = ("mount",)
    filesystems = ("overlay",)

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        merged = ctx.subdir(f"L{self.index}-overlay")
        with contextlib.ExitStack() as stack:
            lines: list[str] = []
            if options.readonly:
                # A read-only overlay has no upper: two lowers are needed, so add an empty one.
                empty = ctx.subdir(f"L{self.index}-overlay-empty")
                mount_options = [f"lowerdir={below.path}:{empty}"]
            else:
                upper, work, upper_lines = upper_dirs(ctx, f"L{self.index}-overlay", options, stack)
                lines += upper_lines
                mount_options = [f"lowerdir={below.path}", f"upperdir={upper}", f"workdir={work}"]
            mount_options += options.mount_options
            stack.enter_context(
                ctx.scratch.mounted("overlay", merged, fstype="overlay", options=mount_options)
            )
            lines.append(mount_of(merged).line())
            yield Exposed(path=merged, mount_lines=lines, fs_size=below.fs_size)
