"""extract: unpack a source archive, staged on a tmpfs, onto the stack (the seed's
"extract the source tarballs from a memory fs onto an empty fs")."""

import contextlib
import shlex
import shutil
from functools import cached_property

from pydantic import field_validator

from layerbench.content.archives import TAR_FLAG, Archive, archive_estimate, check_spec, packed_size, resolve
from layerbench.core.facts import Fact, declare
from layerbench.linux.mounts import mount_of
from layerbench.stacks.base import BuildContext, BuiltStack
from layerbench.workloads.base import Prepared, Workload, WorkloadOptions, register

FILES = Fact("files", "before", "the archive's entries", int)
STAGED_ON = Fact("staged_on", "before", "the mount the archive was staged on before the run", str)
declare(FILES, STAGED_ON)

_STAGE_SLACK = 64 * 2**20  # the staging tmpfs is the archive's size plus this


class ExtractOptions(WorkloadOptions):
    archive: str = "builtin:source-tree"
    sync: bool = True  # a final syncfs, inside the timed run, makes the files durable

    @field_validator("archive")
    @classmethod
    def _archive(cls, value: str) -> str:
        return check_spec(value)


@register
class Extract(Workload[ExtractOptions]):
    kind = "extract"
    Options = ExtractOptions
    summary = "untar a source tree staged on a tmpfs onto the stack, then syncfs"
    reusable = True
    tools = ("tar", "sync")
    writes = True

    def data_bytes(self, capacity: int | None, reference: int | None) -> int:
        return archive_estimate(self.options.archive)

    def staging_bytes(self) -> int:
        options = self.options
        return packed_size(options.archive) + _STAGE_SLACK

    @cached_property
    def archive(self) -> Archive:
        return resolve(self.options.archive)

    def fetch(self) -> None:
        self.archive  # noqa: B018 - packs a built-in archive once, untimed

    def packed(self) -> Archive:
        return self.archive

    def use_packed(self, archive: Archive) -> None:
        self.archive = archive

    def prepare(self, ctx: BuildContext, stack: BuiltStack, resources: contextlib.ExitStack) -> Prepared:
        options = self.options
        archive = self.archive
        stage = ctx.subdir("stage")
        size = archive.path.stat().st_size + _STAGE_SLACK
        resources.enter_context(
            ctx.scratch.mounted("layerbench-stage", stage, fstype="tmpfs", options=[f"size={size}"])
        )
        staged = stage / archive.path.name
        shutil.copyfile(archive.path, staged)
        target = stack.top / "extract"
        target.mkdir()
        tar = [
            "tar",
            "-x",
            *([TAR_FLAG[archive.compression]] if archive.compression else []),
            "-f",
            str(staged),
            "-C",
            str(target),
        ]
        # sh runs tar, then syncfs of the target and of every file system under it, all
        # inside the timed run: the data is on the device when the run ends.
        durable = [str(target), *map(str, stack.durable_paths()[1:])]
        script = f"{shlex.join(tar)} && exec sync -f {shlex.join(durable)}"
        argv = ["sh", "-c", script] if options.sync else tar
        return Prepared(
            argv=argv,
            cwd=stack.top,
            units=archive.bytes,
            unit="bytes",
            durable_bytes=archive.bytes if options.sync else None,
            facts={FILES.key: archive.files, STAGED_ON.key: mount_of(stage).line()},
        )
