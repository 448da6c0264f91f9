"""The order of an experiment's trials: warm-ups first for every (stack, workload), then
the measured repetitions; interleaved (each repetition visits the workloads in turn and
the stacks in an order shuffled by the seed, so drift hits every stack alike) or
sequential (stack by stack)."""

import random
from dataclasses import dataclass

from layerbench.plan import Plan


@dataclass(frozen=True)
class Trial:
    index: int
    stack: str
    workload: str
    rep: int  # 0-based among measured runs; warm-ups count separately
    warmup: bool
    rerun: int = 0  # a re-run of a disturbed trial: 1, 2 ...


def schedule(plan: Plan, seed: int) -> list[Trial]:
    rng = random.Random(seed)
    stacks = list(plan.stacks)
    trials: list[Trial] = []

    def add(stack: str, workload: str, rep: int, warmup: bool) -> None:
        trials.append(Trial(len(trials), stack, workload, rep, warmup))

    if plan.order == "sequential":
        for stack in stacks:
            for workload in plan.workloads:
                for rep in range(plan.warmup):
                    add(stack, workload, rep, True)
                for rep in range(plan.reps):
                    add(stack, workload, rep, False)
        return trials
    rounds = [(rep, True) for rep in range(plan.warmup)] + [(rep, False) for rep in range(plan.reps)]
    for rep, warmup in rounds:
        for workload in plan.workloads:
            for stack in rng.sample(stacks, len(stacks)):
                add(stack, workload, rep, warmup)
    return trials
