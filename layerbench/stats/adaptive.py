"""Adaptive repetitions (reps = "auto"): after each round, every (stack, workload) whose
elapsed-time comparison with the baseline is not yet decided (slower, faster or
equivalent, see stats) and whose interval is still wider than the target gets another
repetition, run in an interleaved round with the baseline (shuffled), until every pair
is decided or max_reps is reached. Decided pairs get no more runs.

The width is the interval's half-width relative to the ratio: (high - low) / 2 / ratio,
so a target of 0.02 asks for "the ratio, +-2 %" whatever the ratio is.

Looking at the data after every round and stopping once decided raises the chance of a
false alarm above what one look at the end would give; `layerbench selftest` measures
that rate for this rule by simulation and prints it.
"""

import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from typing_extensions import TypedDict  # pydantic validates it before Python 3.12

from layerbench import stats
from layerbench.core.facts import JSON, Fact
from layerbench.core.runs import RunRecord


@dataclass
class Width:
    stack: str
    workload: str
    ratio: float | None
    half_width: float | None  # relative; None while there are too few runs
    decision: str = "insufficient data"

    def converged(self, target: float) -> bool:
        decided = self.decision in (*stats.SIGNIFICANT, "equivalent")
        return decided or (self.half_width is not None and self.half_width < target)


class State(TypedDict):
    """Where an auto experiment's repetitions stand (the experiment's `adaptive_reps` fact)."""

    target_ci: float
    max_reps: int
    reps_used: dict[str, int]  # per workload
    converged: bool
    not_converged: list[Width]
    widths: list[Width]


# An experiment's fact, not a run's: stored with the experiment (Store.set_experiment_fact).
STATE = Fact("adaptive_reps", "after", "where the adaptive repetitions stand", State)


def ratio_widths(
    runs: list[RunRecord],
    baseline: str,
    stacks: list[str],
    workloads: list[str],
    *,
    design: stats.Design | None = None,
) -> list[Width]:
    widths = []
    for row in stats.summaries(runs, baseline, stacks, workloads, ["wall_s"], design=design):
        if row.stack == baseline:
            continue
        half = None
        if row.ratio and row.ratio_ci_low is not None and row.ratio_ci_high is not None and row.n >= 2:
            half = (row.ratio_ci_high - row.ratio_ci_low) / 2 / row.ratio
            half = half if half < float("inf") else None
        widths.append(Width(row.stack, row.workload, row.ratio, half, row.decision))
    return widths


def next_round(
    runs: list[RunRecord],
    *,
    baseline: str,
    stacks: list[str],
    workloads: list[str],
    target: float,
    max_reps: int,
    seed: int,
    design: stats.Design | None = None,
) -> tuple[list[tuple[str, str, int]], State]:
    """The (stack, workload, rep) of the next round (empty when done) and the state so far."""
    widths = ratio_widths(runs, baseline, stacks, workloads, design=design)
    measured = [r for r in runs if not r.warmup]
    reps_done = {w: 1 + max((r.rep for r in measured if r.workload == w), default=-1) for w in workloads}
    open_pairs = {(x.stack, x.workload) for x in widths if not x.converged(target)}
    open_workloads = [w for w in workloads if any(pair[1] == w for pair in open_pairs)]
    state = State(
        target_ci=target,
        max_reps=max_reps,
        reps_used=reps_done,
        converged=not open_workloads,
        not_converged=[x for x in widths if not x.converged(target)],
        widths=widths,
    )
    rng = random.Random(seed + sum(reps_done.values()))
    trials = []
    for workload in open_workloads:
        rep = reps_done[workload]
        if rep >= max_reps:
            continue
        wanted = [s for s in stacks if s == baseline or (s, workload) in open_pairs]
        trials += [(stack, workload, rep) for stack in rng.sample(wanted, len(wanted))]
    return trials, state


def as_fact(state: State) -> dict[str, object]:
    return {
        **state,
        "not_converged": [asdict(x) for x in state["not_converged"]],
        "widths": [asdict(x) for x in state["widths"]],
    }


def notes(facts: Mapping[str, JSON]) -> list[str]:
    """What the reports say about the repetitions an auto experiment used."""
    state = STATE.read(facts)
    if not state:
        return []
    used = ", ".join(f"{w} {n}" for w, n in state["reps_used"].items())
    if state["converged"]:
        return [
            f'reps = "auto": repetitions used per workload: {used}; every comparison decided '
            f"(or its interval within +-{state['target_ci']:.1%})"
        ]
    wide = ", ".join(
        f"{x.stack}/{x.workload} (+-{x.half_width:.1%})"
        if x.half_width is not None
        else f"{x.stack}/{x.workload} (no CI)"
        for x in state["not_converged"]
    )
    return [
        f'reps = "auto": repetitions used per workload: {used}; undecided and not within '
        f"+-{state['target_ci']:.1%} after max_reps = {state['max_reps']}: {wide}"
    ]
