"""metadata: many small files created, stat'ed and deleted (a file-system metadata load)."""

import contextlib
import sys
from pathlib import Path
from typing import Literal

from pydantic import Field

from layerbench.core.sizes import SizeText, parse_size
from layerbench.stacks.base import BuildContext, BuiltStack
from layerbench.workloads.base import Prepared, Workload, WorkloadOptions, register

_CHILD = Path(__file__).with_name("_metadata_child.py")


class MetadataOptions(WorkloadOptions):
    files: int = Field(default=20000, gt=0, le=10_000_000)
    size: SizeText = "4K"
    files_per_dir: int = Field(default=1000, gt=0)
    phases: list[Literal["create", "stat", "read", "delete"]] = ["create", "stat", "delete"]


@register
class Metadata(Workload[MetadataOptions]):
    kind = "metadata"
    Options = MetadataOptions
    summary = "create, stat, read and delete many small files, then syncfs"
    reusable = True
    writes = True

    def data_bytes(self, capacity: int | None, reference: int | None) -> int:
        options = self.options
        # Each file takes at least a 4 KiB block, and a directory per files_per_dir.
        return options.files * max(parse_size(options.size), 4096)

    def prepare(self, ctx: BuildContext, stack: BuiltStack, resources: contextlib.ExitStack) -> Prepared:
        options = self.options
        work = stack.top / "metadata"
        argv = [
            sys.executable,
            "-S",
            str(_CHILD),
            str(work),
            str(options.files),
            str(parse_size(options.size)),
            str(options.files_per_dir),
            ",".join(options.phases),
            # syncfs'd after the phases: the file systems under the top too (see durable_paths)
            *map(str, stack.durable_paths()[1:]),
        ]
        # The files it leaves (no delete phase) are claimed durable by its final syncfs.
        kept = "create" in options.phases and "delete" not in options.phases
        durable = options.files * parse_size(options.size) if kept else None
        return Prepared(argv=argv, cwd=stack.top, units=options.files, unit="files", durable_bytes=durable)
