"""md-raid1: two image files on the layer below, a loop device over each, mirrored by the
kernel's md RAID1, a file system on the array. Two fresh sparse images read as zeros alike,
so by default the array is created in sync (`--assume-clean`); `resync = true` has md copy
one member onto the other and waits for it to finish before the workload is prepared.

The host's kernel here has no md: put the layer above a vm layer, whose guest kernel loads
md_mod and raid1 at boot."""

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import field_validator

from layerbench.core.errors import SetupError, UserError
from layerbench.core.sizes import SizeText, parse_size
from layerbench.linux import system
from layerbench.stacks.base import BuildContext, Exposed, Layer, Placement, register
from layerbench.stacks.image import DeviceFsOptions, loop_image

_MIN_SIZE = 64 * 2**20
_SUPERBLOCK = 8 * 2**20  # md's 1.2 superblock, its bitmap and data offset, at most


class MdRaid1Options(DeviceFsOptions):
    size: SizeText = "1G"  # each member's
    bitmap: Literal["none", "internal"] = "none"  # a write-intent bitmap (written on every write)
    resync: bool = False

    @field_validator("size")
    @classmethod
    def _big_enough(cls, value: str) -> str:
        if parse_size(value) < _MIN_SIZE:
            raise ValueError(f"{value}: at least 64M")
        return value


@register
class MdRaid1Layer(Layer[MdRaid1Options]):
    kind = "md-raid1"
    Options = MdRaid1Options
    summary = "two image files on loop devices mirrored by md RAID1, a file system on the array"
    tools = ("mdadm", "losetup", "mount")
    kernel_modules = ("md_mod", "raid1")

    @classmethod
    def extra_tools(cls, options: object) -> tuple[str, ...]:
        return (f"mkfs.{getattr(options, 'fs', 'ext4')}",)

    def fs_size(self) -> int | None:
        return parse_size(self.options.size) - _SUPERBLOCK

    def place(self, below: Placement) -> Placement:
        options = self.options
        # Both members land on the layer below: twice the size, and the array holds one.
        placed = below.bounded(2 * parse_size(options.size), f"md-raid1 members size={options.size}")
        usable = parse_size(options.size) - _SUPERBLOCK
        placed = replace(placed, capacity=min(placed.capacity or usable, usable))
        holder = f"md-raid1 size={options.size}"
        return replace(placed, holder=holder, writable=not options.readonly)

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        images = [below.path / f"layer{self.index}-md-{side}.img" for side in ("a", "b")]
        target = ctx.subdir(f"L{self.index}-md-raid1")
        with contextlib.ExitStack() as held:
            loops = [held.enter_context(loop_image(ctx, image, parse_size(options.size))) for image in images]

            def create() -> None:
                name = f"/dev/md/lb{ctx.workdir.name[-12:]}L{self.index}"
                array = ["--create", name, "--run", "--metadata=1.2", "--level=1", "--raid-devices=2"]
                array += [f"--bitmap={options.bitmap}", *([] if options.resync else ["--assume-clean"])]
                system.run(["mdadm", *array, *loops], timeout=600)

            device = held.enter_context(ctx.scratch.md_array(loops, create))
            if options.resync:
                _wait_resync(Path(device).name)
            mounted = held.enter_context(options.made_and_mounted(ctx, device, target))
            state = "resynced" if options.resync else "created in sync (--assume-clean)"
            line = (
                f"{device} md RAID1 of {' and '.join(loops)}, bitmap {options.bitmap}, {state} "
                f"[{' '.join(f'{loop} -> {image}' for loop, image in zip(loops, images, strict=True))}]"
            )
            yield Exposed(path=target, mount_lines=[mounted, line], fs_size=self.fs_size())


def _wait_resync(array: str) -> None:
    """Until md says the array is idle (mdadm --wait returns 1 when there was nothing to wait for)."""
    with contextlib.suppress(SetupError):
        system.run(["mdadm", "--wait", f"/dev/{array}"], timeout=3600)
    action = Path("/sys/block", array, "md", "sync_action").read_text().strip()
    if action != "idle":
        raise UserError(f"md-raid1: /dev/{array} is still in {action} after mdadm --wait")
