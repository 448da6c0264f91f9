"""dir: a fresh directory inside the layer below (the plain file system, the baseline)."""

import contextlib
from collections.abc import Iterator

from layerbench.stacks.base import BuildContext, Exposed, Layer, LayerOptions, register


class DirOptions(LayerOptions):
    name: str = "dir"


@register
class DirLayer(Layer[DirOptions]):
    kind = "dir"
    Options = DirOptions
    summary = "a fresh directory on the file system below (the base fs)"
    tools = ("mount",)

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        path = below.path / f"{options.name}{self.index}"
        path.mkdir()
        if not options.readonly:
            yield Exposed(path=path)
            return
        with ctx.scratch.mounted(str(path), path, bind=True, readonly_bind=True):
            yield Exposed(path=path, mount_lines=[_line(path)])


def _line(path: object) -> str:
    from layerbench.linux.mounts import mount_of

    return mount_of(str(path)).line()
