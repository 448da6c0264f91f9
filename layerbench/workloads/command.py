"""command: any command line, run in the stack's top directory."""

import contextlib
import shlex

from pydantic import field_validator

from layerbench.linux import system
from layerbench.stacks.base import BuildContext, BuiltStack
from layerbench.workloads.base import Prepared, Workload, WorkloadOptions, register


class CommandOptions(WorkloadOptions):
    run: str
    prepare: str = ""  # untimed, before each run, in the same directory
    units: float | None = None  # work the command does, for a throughput figure
    unit: str | None = None

    @field_validator("run")
    @classmethod
    def _run(cls, value: str) -> str:
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split the command line: {exc}") from None
        if not words:
            raise ValueError("the command is empty")
        return value


@register
class Command(Workload[CommandOptions]):
    kind = "command"
    Options = CommandOptions
    summary = "any command line, run in the stack's top directory ($LAYERBENCH_TARGET)"
    reusable = True
    tools = ("sh",)

    def prepare(self, ctx: BuildContext, stack: BuiltStack, resources: contextlib.ExitStack) -> Prepared:
        options = self.options
        env = {"LAYERBENCH_TARGET": str(stack.top)}
        if options.prepare.strip():
            system.run(["sh", "-c", f"cd {shlex.quote(str(stack.top))} && {options.prepare}"], timeout=3600)
        return Prepared(
            argv=shlex.split(options.run), cwd=stack.top, env=env, units=options.units, unit=options.unit
        )
