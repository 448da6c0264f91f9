"""squashfuse: the squashfs image of the `squashfs` layer, served by squashfuse_ll in
userspace instead of the kernel: the FUSE alternative that snaps and AppImages fall back to.
The image is packed untimed as for `squashfs`; the daemon is journaled, waited for and
stopped as bindfs is, and its CPU is recorded as helper CPU."""

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from pydantic import field_validator

from layerbench.linux import system
from layerbench.stacks.base import BuildContext, Exposed, register
from layerbench.stacks.fuse import FuseDaemonLayer, one_option_each
from layerbench.stacks.packed import SquashfsImage, SquashfsOptions, _unpacked


class SquashfuseOptions(SquashfsOptions):
    # squashfuse_ll serves requests on several threads by default; False passes -s (one at a
    # time, squashfuse's behaviour before 0.1.104 and the known trap for parallel readers).
    multithreaded: bool = True
    options: list[str] = []  # further -o options, e.g. ["max_threads=4", "clone_fd"]

    @field_validator("options")
    @classmethod
    def _no_blanks(cls, values: list[str]) -> list[str]:
        return one_option_each(values)


@register
class SquashfuseLayer(FuseDaemonLayer[SquashfuseOptions], SquashfsImage[SquashfuseOptions]):
    kind = "squashfuse"
    Options = SquashfuseOptions
    summary = "the squashfs image of the content below served by squashfuse_ll (FUSE), not the kernel"
    tools = ("mksquashfs", "squashfuse_ll", "umount", "tar")
    filesystems = ("fuse",)
    daemon_name = "squashfuse_ll"

    def daemon_argv(self, source: Path, target: Path) -> list[str]:
        options = self.options
        threads = [] if options.multithreaded else ["-s"]
        # ro: the mount says what it is (a writer gets EROFS from the kernel, not the daemon)
        return [
            "squashfuse_ll",
            "-f",
            *threads,
            "-o",
            ",".join(["ro", *options.options]),
            str(source),
            str(target),
        ]

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        source = _unpacked(ctx, options.content, self.index) if options.content else below.path
        image = below.path / f"layer{self.index}.sqfs"
        try:
            system.run(self.pack_command(source, image), timeout=3600)
            if options.content:
                shutil.rmtree(source)  # what is packed is in the image now
            with super().expose(ctx, replace(below, path=image)) as exposed:
                size = image.stat().st_size
                exposed.mount_lines = [
                    f"{line} [image {image}, {size} bytes]" for line in exposed.mount_lines
                ]
                yield exposed
        finally:
            with contextlib.suppress(FileNotFoundError):
                image.unlink()
