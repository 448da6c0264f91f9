"""read-tree: walk a tree on the stack's top, cold (caches dropped) or warm, and `stat`
every entry (`mode = "stat"`, the `ls -lR` of the composefs discussions) or read every file
to its end (`mode = "read"`), with one or several parallel readers (squashfuse's single
thread is the known trap).

The tree: `tree = "top"` (the default) is whatever the stack's top holds (a squashfs or
erofs layer's content, or the stack's world). `builtin:NAME` or a tar archive is unpacked
onto a writable top untimed first; a read-only top is read as it is, so it should hold the
same tree (a squashfs or erofs layer with `content` set to it): the stacks then compare one
tree."""

import contextlib
import os
import sys
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from layerbench.content.archives import archive_estimate, builtin_archive, check_spec, resolve, unpack
from layerbench.core.errors import SetupError
from layerbench.core.facts import Fact, declare
from layerbench.core.runs import RunRecord
from layerbench.linux import system
from layerbench.stacks.base import BuildContext, BuiltStack
from layerbench.workloads.base import Prepared, Workload, WorkloadOptions, register

ENTRIES = Fact("entries", "during", "entries the read visited", int)
READ_BYTES_TOTAL = Fact("read_bytes_total", "during", "bytes the read read", int)
READ_ERRORS = Fact("read_errors", "during", "entries it could not read", int)
MODE = Fact("mode", "before", "how the tree was read", str)
declare(ENTRIES, READ_BYTES_TOTAL, READ_ERRORS, MODE)

_CHILD = Path(__file__).with_name("_read_tree_child.py")


class ReadTreeOptions(WorkloadOptions):
    tree: str = "top"  # "top", "builtin:NAME" or a tar archive
    mode: Literal["stat", "read"] = "stat"
    readers: int = Field(default=1, ge=1, le=256)
    warm: bool = False  # True: the caches are not dropped before the run (a second look)

    @field_validator("tree")
    @classmethod
    def _tree(cls, value: str) -> str:
        return value if value == "top" else check_spec(value, what="tree", others="top, ")
        if not Path(value).is_file():
            raise ValueError(f"no such archive file {value!r}; give top, builtin:NAME or a tar archive")
        return value


@register
class ReadTree(Workload[ReadTreeOptions]):
    kind = "read-tree"
    Options = ReadTreeOptions
    summary = "stat or read every entry of a tree on the stack's top, cold or warm, 1..N readers"
    reusable = True
    tools = ("tar",)

    def data_bytes(self, capacity: int | None, reference: int | None) -> int:
        tree = self.options.tree
        return 0 if tree == "top" else archive_estimate(tree)

    def fetch(self) -> None:
        tree = self.options.tree
        if tree.startswith("builtin:"):
            builtin_archive(tree.removeprefix("builtin:"))  # packed once, untimed

    def prepare(self, ctx: BuildContext, stack: BuiltStack, resources: contextlib.ExitStack) -> Prepared:
        options = self.options
        root = stack.top
        if options.tree != "top" and os.access(root, os.W_OK):
            unpack(resolve(options.tree), root)
        if not any(root.iterdir()):
            raise SetupError(f'read-tree: {root} is empty; give the stack content or tree = "builtin:..."')
        output = ctx.workdir / "read-tree.out"
        argv = [
            "sh",
            "-c",
            f'exec "$0" -S "$@" > {output}',
            sys.executable,
            str(_CHILD),
            str(root),
            options.mode,
            str(options.readers),
        ]
        prepared = Prepared(argv=argv, cwd=ctx.workdir, unit="files", drop_caches=not options.warm)
        if options.warm:
            # A first walk fills the caches, untimed: the run is the second look.
            system.run(
                [sys.executable, "-S", str(_CHILD), str(root), options.mode, str(options.readers)],
                timeout=3600,
            )
        prepared.after_run = lambda done: _collect(done, output, options.mode)
        return prepared

    @classmethod
    def notes(cls, runs: dict[str, list[RunRecord]]) -> list[str]:
        found = []
        for stack, group in runs.items():
            errors = max((r.fact(READ_ERRORS) or 0 for r in group), default=0)
            if errors:
                found.append(f"{stack}: read-tree could not read {errors} entries (counted, not fatal)")
        return found


def _collect(prepared: Prepared, output: Path, mode: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        entries, size, errors = (int(v) for v in output.read_text().split()[-3:])
        prepared.units = entries
        prepared.facts.update(
            {ENTRIES.key: entries, READ_BYTES_TOTAL.key: size, READ_ERRORS.key: errors, MODE.key: mode}
        )
