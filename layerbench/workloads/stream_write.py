"""stream-write: one large sequential file written with dd and made durable (the seed's
32 GB from /dev/zero), optionally onto a file system filled first."""

import contextlib
import os
import subprocess
from typing import Literal

from pydantic import Field, field_validator

from layerbench.core.errors import SetupError
from layerbench.core.facts import Fact, declare
from layerbench.core.sizes import SizeText, parse_size
from layerbench.linux import system
from layerbench.stacks.base import BuildContext, BuiltStack
from layerbench.workloads.base import Prepared, Workload, WorkloadOptions, register

FILL_BYTES = Fact("fill_bytes", "before", "bytes of fill written before the run (the fs made non-empty)", int)
FILL_WITH = Fact(
    "fill_with",
    "before",
    "how the fill was made: written with O_DIRECT, written through the page cache, or allocated",
    str,
)
declare(FILL_BYTES, FILL_WITH)


class StreamWriteOptions(WorkloadOptions):
    size: SizeText = "1G"
    block_size: SizeText = "1M"
    fill: float | str = Field(
        default=0.0,
        description="untimed data written first: a fraction of the file system (0-0.95) or a size",
    )
    # How the fill takes its space: "direct" (zeros written with O_DIRECT and synced: on the
    # disk as "write" leaves them, without a page cache to fill and drop; where the top takes
    # no O_DIRECT, through the page cache), "write" (zeros written through the page cache and
    # synced, as the seed did) or "allocate" (fallocate(2): the blocks or pages are taken and
    # nothing is copied; where the top cannot preallocate, it is written). Not "allocate",
    # measured: a virtio disk that is fast only right after large writes met the timed write
    # cold after an allocated fill (1 GiB: 0.73-3.34 s against 0.66-0.88 s after a written one).
    fill_with: Literal["direct", "write", "allocate"] = "direct"
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
    reusable = True
    tools = ("dd", "sync", "fallocate")
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

    def run_memory_bytes(self) -> int:
        return parse_size(self.options.size)  # the fill is written before, untimed

    def _fill(self, path: "os.PathLike[str]", nbytes: int) -> str:
        """Take nbytes on the top, untimed; how it was done ("direct", "write" or "allocate")."""
        megabytes = -(-nbytes // 2**20)
        dd = ["dd", "if=/dev/zero", f"of={os.fspath(path)}", "bs=1M", f"count={megabytes}", "status=none"]
        first = {
            "allocate": ["fallocate", "-l", str(nbytes), os.fspath(path)],
            "direct": [*dd, "oflag=direct"],
        }.get(self.options.fill_with)
        if first is not None:
            try:
                tried = subprocess.run(first, capture_output=True, check=False, timeout=3600)
            except subprocess.TimeoutExpired:
                raise SetupError(f"stream-write: the fill ({' '.join(first)}) took over an hour") from None
            if tried.returncode == 0:
                return self.options.fill_with
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # a top without fallocate(2) or O_DIRECT (a FUSE daemon): write it
        system.run(dd, timeout=3600)
        return "write"

    def prepare(self, ctx: BuildContext, stack: BuiltStack, resources: contextlib.ExitStack) -> Prepared:
        options = self.options
        block = parse_size(options.block_size)
        count = -(-parse_size(options.size) // block)
        fill = self.fill_bytes(stack)
        filled_with = None
        if fill:
            filled_with = self._fill(stack.top / "fill.dat", fill)
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
            facts={FILL_BYTES.key: fill, FILL_WITH.key: filled_with},
            durable_bytes=count * block if options.fsync else None,
        )
