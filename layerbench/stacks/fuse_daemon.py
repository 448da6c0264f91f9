"""fuse-daemon: any FUSE file system, given its daemon's command line: a daemon of your own,
or one build of it per variant under `layerbench bisect`. The daemon runs in the foreground
(the pid held is the daemon's: its CPU is the run's helper CPU), serving the layer below at
the layer's mount point, journaled and stopped like bindfs."""

import shutil
from pathlib import Path

from pydantic import Field, field_validator

from layerbench.core.errors import SetupError
from layerbench.stacks.base import LayerOptions, register
from layerbench.stacks.fuse import FuseDaemonLayer

SOURCE, TARGET = "{source}", "{target}"


class FuseDaemonOptions(LayerOptions):
    # The daemon's argv, in the foreground; "{source}" is replaced by the layer below's
    # directory, "{target}" by the mount point it must serve.
    command: list[str] = Field(min_length=1)

    @field_validator("command")
    @classmethod
    def _serves_the_target(cls, values: list[str]) -> list[str]:
        for value in values:
            if not value.strip() or "\x00" in value:
                raise ValueError(f"{value!r} is not a usable argument")
        if not any(TARGET in value for value in values):
            raise ValueError(
                f'names no mount point: one argument must hold "{TARGET}" (and "{SOURCE}" the layer below)'
            )
        return values


@register
class CommandFuseLayer(FuseDaemonLayer[FuseDaemonOptions]):
    kind = "fuse-daemon"
    Options = FuseDaemonOptions
    summary = 'any FUSE daemon by its command line ("{source}": the layer below, "{target}": its mount point)'
    tools = ("umount",)
    daemon_name = "fuse-daemon"

    def daemon_argv(self, source: Path, target: Path) -> list[str]:
        program = self.options.command[0]
        if shutil.which(program) is None:
            raise SetupError(f"fuse-daemon: {program}: no such executable (command[0] of the layer)")
        return [
            value.replace(SOURCE, str(source)).replace(TARGET, str(target)) for value in self.options.command
        ]
