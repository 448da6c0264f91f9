"""stream-write: one large sequential file written with dd and made durable (the seed's
32 GB from /dev/zero), optionally onto a file system filled first."""

import contextlib
import os

from pydantic import Field, field_validator

from layerbench import system
from layerbench.errors import SetupError
from layerbench.sizes import SizeText, parse_size
from layerbench.stacks.base import BuildContext, BuiltStack
from layerbench.workloads.base import Prepared, Workload, WorkloadOptions, register


class StreamWriteOptions(WorkloadOptions):
    size: SizeText = "1G"
    block_size: SizeText = "1M"
    fill: float | str = Field(
        default=0.0,
        description="untimed data written first: a fraction of the file system (0-0.95) or a size",
    )
    fsync: bool = True  # the final fsync is part of the timed run
    direct: bool = False  # O_DIRECT writes, bypassing the page cache

    @field_validator("fill")
    @classmethod
    def _fill(cls, value: float | str) -> float | str:
        if isinstance(value, str):
            parse_size(value)
        elif not 0 <= value <= 0.95:
            raise ValueError("a fraction must be between 0 and 0.95 (or give a size like '1G')")
        return value


@register
class StreamWrite(Workload[StreamWriteOptions]):
    kind = "stream-write"
    Options = StreamWriteOptions
    summary = "dd one large file from /dev/zero, fsync'd; optionally onto a pre-filled fs"
    tools = ("dd", "sync")
    writes = True

    def fill_bytes(self, stack: BuiltStack) -> int:
        options = self.options
        if isinstance(options.fill, str):
            return parse_size(options.fill)
        if options.fill == 0:
            return 0
        base = stack.fs_size or self.reference_fs_size or 2 * parse_size(options.size)
        return int(options.fill * base)

    def data_bytes(self, capacity: int | None, reference: int | None) -> int:
        options = self.options
        size = parse_size(options.size)
        if isinstance(options.fill, str):
            fill = parse_size(options.fill)
        else:
            fill = int(options.fill * (capacity or reference or 2 * size))
        return size + fill

    def prepare(self, ctx: BuildContext, stack: BuiltStack, resources: contextlib.ExitStack) -> Prepared:
        options = self.options
        block = parse_size(options.block_size)
        count = -(-parse_size(options.size) // block)
        fill = self.fill_bytes(stack)
        if fill:
            fill_file = stack.top / "fill.dat"
            system.run(
                [
                    "dd",
                    "if=/dev/zero",
                    f"of={fill_file}",
                    "bs=1M",
                    f"count={-(-fill // 2**20)}",
                    "status=none",
                ],
                timeout=3600,
            )
            system.run(["sync", "-f", str(stack.top)])
        free = os.statvfs(stack.top)
        if free.f_bavail * free.f_frsize < count * block:
            raise SetupError(
                f"stream-write: {count * block} bytes do not fit in the "
                f"{free.f_bavail * free.f_frsize} bytes free on {stack.top} after the fill"
            )
        argv = [
            "dd",
            "if=/dev/zero",
            f"of={stack.top / 'stream.dat'}",
            f"bs={block}",
            f"count={count}",
            "status=none",
        ]
        if options.fsync:
            argv.append("conv=fsync")
        if options.direct:
            argv.append("oflag=direct")
        return Prepared(
            argv=argv,
            cwd=stack.top,
            units=count * block,
            unit="bytes",
            facts={"fill_bytes": fill},
            durable_bytes=count * block if options.fsync else None,
        )
