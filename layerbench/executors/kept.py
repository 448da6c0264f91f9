"""Stacks kept for a workload's repetitions (the workload's `keep_stack = true`): each stack is
built, and the workload prepared on it, once; each repetition then runs on it from the
dropped caches on, and what the run added at the stack's top is removed after it, in its
trial's teardown. Fresh for every trial: the memory held warm, the dropped caches, the settle
wait, the run's control group and journal entry. Kept across them: the stack's mounts and
devices, the workload's preparation (a stream-write's fill, an extract's staged archive) and
whatever the file system remembers of the runs before (its allocator's state, its journal).
The reports say which runs ran on a kept stack (the run fact `kept_stack_runs_before`)."""

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from layerbench.core.facts import Fact, declare
from layerbench.core.runs import RunRecord
from layerbench.scratch.resources import remove_tree
from layerbench.stacks.base import BuildContext, BuiltStack
from layerbench.store.records import StackRecord
from layerbench.workloads.base import Prepared

RUNS_BEFORE = Fact(
    "kept_stack_runs_before",
    "before",
    "keep_stack: the runs the kept stack served before this one (0: built for this trial)",
    int,
)
declare(RUNS_BEFORE)

# (experiment, stack, workload): a kept stack serves one workload of one experiment.
Key = tuple[int, str, str]


@dataclass
class Kept:
    """One kept stack, prepared for its workload."""

    resources: contextlib.ExitStack  # its directory, mounts, devices and preparation
    ctx: BuildContext
    built: BuiltStack
    devices: list[str]
    record: StackRecord
    prepared: Prepared  # never run itself: each run takes prepared.again()
    entries: frozenset[str]  # the top's entries once prepared: they stay, what a run adds goes
    served: int = 0
    first_facts: dict[str, object] = field(default_factory=dict)  # its first run's only

    def clear(self) -> None:
        """Remove what the last run added at the stack's top."""
        with os.scandir(self.built.top) as found:
            added = [entry for entry in found if entry.name not in self.entries]
        for entry in added:
            if entry.is_dir(follow_symlinks=False):
                remove_tree(Path(entry.path))
            else:
                os.unlink(entry.path)


class KeptStacks:
    """The stacks an executor keeps between trials, torn down by close()."""

    def __init__(self) -> None:
        self._kept: dict[Key, Kept] = {}

    def get(self, key: Key) -> Kept | None:
        return self._kept.get(key)

    def add(self, key: Key, kept: Kept) -> None:
        self._kept[key] = kept

    def drop(self, key: Key) -> None:
        """Tear one down (its run failed in a way that leaves it in doubt): the next trial
        of its workload builds it afresh."""
        if (kept := self._kept.pop(key, None)) is not None:
            kept.resources.close()

    def only_for(self, experiment_id: int) -> None:
        """An executor that serves many experiments (a fleet host's agent) keeps stacks for
        the current one only."""
        for key in [key for key in self._kept if key[0] != experiment_id]:
            self.drop(key)

    def close(self) -> None:
        """Tear every kept stack down, the last kept first; each is torn down even when one
        before it failed to be."""
        with contextlib.ExitStack() as every:
            for key in list(self._kept):
                every.callback(self.drop, key)


def notes(runs: list[RunRecord]) -> list[str]:
    """What the reports say of runs on kept stacks: not every repetition had a fresh stack."""
    served = [(run, before) for run in runs if (before := run.fact(RUNS_BEFORE)) is not None]
    if not served:
        return []
    workloads = sorted({run.workload for run, _ in served})
    built = sum(1 for _, before in served if before == 0)
    most = 1 + max(before for _, before in served)
    return [
        f"keep_stack: {len(served)} run(s) of {', '.join(workloads)} ran on kept stacks ({built} "
        f"built, each serving up to {most} runs): a repetition ran on the stack the one before "
        "it used, prepared once, after that run's files were removed, not on a freshly built one"
    ]
