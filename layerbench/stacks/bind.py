"""bind: a bind mount of the layer below (Linux's nullfs)."""

import contextlib
from collections.abc import Iterator

from layerbench.linux.mounts import mount_of
from layerbench.stacks.base import BuildContext, Exposed, Layer, LayerOptions, register


@register
class BindLayer(Layer[LayerOptions]):
    kind = "bind"
    summary = "a bind mount of the layer below (Linux's nullfs)"
    tools = ("mount",)

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        target = ctx.subdir(f"L{self.index}-bind")
        with ctx.scratch.mounted(str(below.path), target, bind=True, readonly_bind=self.options.readonly):
            yield Exposed(path=target, mount_lines=[mount_of(target).line()], fs_size=below.fs_size)
