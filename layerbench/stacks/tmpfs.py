"""tmpfs: a memory file system (the seed's memory fs)."""

import contextlib
from collections.abc import Iterator

from layerbench.core.sizes import SizeText, parse_size
from layerbench.linux.mounts import mount_of
from layerbench.stacks.base import BuildContext, Exposed, Layer, LayerOptions, Placement, register


class TmpfsOptions(LayerOptions):
    size: SizeText = "2G"
    mount_options: list[str] = []


@register
class TmpfsLayer(Layer[TmpfsOptions]):
    kind = "tmpfs"
    Options = TmpfsOptions
    summary = "a memory file system of a given size (the seed's memory fs)"
    tools = ("mount",)
    filesystems = ("tmpfs",)
    small_pages = True

    def fs_size(self) -> int | None:
        return parse_size(self.options.size)

    def place(self, below: Placement) -> Placement:
        size = parse_size(self.options.size)
        return Placement(
            medium="memory",
            capacity=size,
            holder=f"tmpfs size={self.options.size}",
            writable=not self.options.readonly,
            reserved_memory=below.reserved_memory,
            reserved_disk=below.reserved_disk,
        )

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        target = ctx.subdir(f"L{self.index}-tmpfs")
        size = parse_size(options.size)
        mount_options = [f"size={size}", *options.mount_options]
        if options.readonly:
            mount_options.append("ro")
        with ctx.scratch.mounted("layerbench", target, fstype="tmpfs", options=mount_options):
            yield Exposed(path=target, mount_lines=[mount_of(target).line()], fs_size=size, standalone=True)
