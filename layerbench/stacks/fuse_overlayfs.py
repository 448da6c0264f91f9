"""fuse-overlayfs: the rootless containers' overlay in userspace, with the same upper and
lower options as `overlay`; its daemon is journaled, waited for and stopped as bindfs is,
and its CPU is recorded as helper CPU."""

import contextlib
from collections.abc import Iterator
from pathlib import Path

from layerbench.stacks.base import BuildContext, Exposed, register
from layerbench.stacks.fuse import FuseDaemonLayer
from layerbench.stacks.overlay import OverlayOptions, OverlayPlacement, upper_dirs


@register
class FuseOverlayfsLayer(FuseDaemonLayer[OverlayOptions], OverlayPlacement):
    kind = "fuse-overlayfs"
    Options = OverlayOptions
    summary = "fuse-overlayfs: the layer below as lower dir, upper on disk or tmpfs, in userspace"
    tools = ("fuse-overlayfs", "umount")
    daemon_name = "fuse-overlayfs"
    _upper: tuple[Path, Path] | None = None

    def daemon_argv(self, source: Path, target: Path) -> list[str]:
        options = self.options
        mount_options = [f"lowerdir={source}"]
        if self._upper is not None:  # without an upper dir fuse-overlayfs mounts read-only
            mount_options += [f"upperdir={self._upper[0]}", f"workdir={self._upper[1]}"]
        return ["fuse-overlayfs", "-f", "-o", ",".join([*mount_options, *options.mount_options]), str(target)]

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        with contextlib.ExitStack() as stack:
            lines: list[str] = []
            if not options.readonly:
                upper, work, lines = upper_dirs(ctx, f"L{self.index}-fuse-overlayfs", options, stack)
                self._upper = (upper, work)
            with super().expose(ctx, below) as exposed:
                exposed.mount_lines = lines + exposed.mount_lines
                yield exposed
