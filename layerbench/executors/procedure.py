"""The trial procedure on a built stack, the same on this host and in a guest: prepare the
workload on the stack's top (untimed), drop the caches unless the workload keeps them warm,
time the run, then let the workload and the layers say what the run did, and, for a run
that claims its data durable, read how much of it is still dirty below the stack before the
stack comes down (an unmount writes back what it holds).

How the run is timed is the caller's: the host settles its disks, puts the child in its
control groups and journals it; a guest waits at the gate for the host's go."""

import contextlib
import dataclasses
from collections.abc import Callable
from pathlib import Path

from layerbench.core import metrics
from layerbench.linux import pagecache
from layerbench.observe import measure
from layerbench.observe.run_result import RunResult
from layerbench.stacks.base import BuildContext, BuiltStack
from layerbench.workloads.base import Prepared, Workload, WorkloadOptions


def run_on_top(
    workload: Workload[WorkloadOptions],
    ctx: BuildContext,
    built: BuiltStack,
    resources: contextlib.ExitStack,
    timed: Callable[[Prepared], measure.RunCounters],
    lap: Callable[[str], None] = lambda phase: None,
) -> RunResult:
    """Prepare, run with timed, collect. lap(phase) marks the end of "prepare" and "run"."""
    prepared = workload.prepare(ctx, built, resources)
    lap("prepare")
    return run_prepared(prepared, ctx, built, timed, lap)


def run_prepared(
    prepared: Prepared,
    ctx: BuildContext,
    built: BuiltStack,
    timed: Callable[[Prepared], measure.RunCounters],
    lap: Callable[[str], None] = lambda phase: None,
) -> RunResult:
    """The rest of the procedure on a prepared stack: drop the caches, run with timed,
    collect (a kept stack, prepared once, runs each repetition from here)."""
    prepared.facts.update(built.before_run())
    if prepared.drop_caches:
        measure.drop_caches()
    counters = timed(prepared)
    lap("run")
    prepared.facts.update(built.run_facts())
    prepared.collect()
    if counters.status == "failed" and prepared.failure:
        counters = dataclasses.replace(counters, error=f"{counters.error}; {prepared.failure}")
    return RunResult(
        counters,
        prepared.units,
        prepared.unit,
        dict(prepared.facts),
        {k: v for k, v in prepared.metrics.items() if k in metrics.reported()},
        prepared.durable_bytes,
        dirty_below(ctx.workdir) if prepared.durable_bytes else None,
    )


def dirty_below(workdir: Path) -> int | None:
    """The trial's files below the stack still dirty, per file, for the durability verdict.
    The stack's directories and images are the trial directory's subdirectories (base,
    L1-...); the files right in it are the harness's (the run's stderr)."""
    return pagecache.dirty_bytes_under(workdir, root_files=False)
