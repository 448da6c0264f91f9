"""A time budget, spent where it decides (`budget = "8m"` in a plan, or `run --budget`).

The plan's repetitions are the first look. At each look every elapsed-time comparison with
the baseline is decided as one family (Holm) at that look's share of alpha; a comparison
decided (slower, faster, or equivalent within the margin) is closed there, with its verdict
and its interval as they were at that look, and gets no more runs. The stacks of the
comparisons still open, and the baseline, get more interleaved rounds (the repetitions grow
by half each look) while the time left of the budget holds them, then the next look.

Looking after every batch of rounds and stopping once decided would raise the chance of a
false alarm above alpha if each look were taken at alpha. Here alpha is spent over at most
`looks` looks, an equal share each (Bonferroni over the looks): whatever the data and however
a look's outcome chose what ran next, the chance of any false claim, at any look, in any
comparison of the family is at most alpha; and a comparison's interval, shown as the look
that closed it drew it, states as its level one minus what the looks it was open at spent on
it (it misses the truth only if one of those intervals did). The price is a stricter level
per look, paid once; `layerbench selftest` measures the design's error rates and coverage by
simulation (sequential_check.py).

The state (looks, their levels, what each one closed and why the rounds stopped) is stored
with the experiment as the fact `sequential`; the reports rebuild each closed comparison
from the runs its look saw."""

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from layerbench import stats
from layerbench.core.facts import JSON, Fact
from layerbench.core.runs import RunRecord

STORED_ROWS_MIN_RUNS = 40
LOOKS = stats.LOOKS  # the planned maximum of looks: alpha is split among them
GROWTH = 1.5  # each look asks for about half as many repetitions again
DECIDED = (*stats.SIGNIFICANT, "equivalent")
METRIC = stats.HEADLINE_METRIC


@dataclass
class Look:
    number: int
    alpha: float  # the family's level at this look
    trials: list[int]  # the trials whose runs it saw
    reps: dict[str, int]  # per workload: repetitions measured so far
    closed: list[tuple[str, str]]  # (stack, workload) decided at this look


@dataclass
class State:
    alpha: float
    looks_planned: int
    budget_s: float | None
    looks: list[Look] = field(default_factory=list)
    stopped: str | None = None  # why no more rounds were added

    @property
    def alpha_per_look(self) -> float:
        return self.alpha / self.looks_planned

    def closed(self) -> set[tuple[str, str]]:
        return {(stack, workload) for look in self.looks for stack, workload in look.closed}

    def as_fact(self) -> dict[str, Any]:
        return asdict(self)


# The experiment's facts (not a run's: stored with the experiment, Store.set_experiment_fact).
STATE = Fact("sequential", "after", "the time budget's looks and why its rounds stopped", State)
# The elapsed-time rows as the experiment's report states them, stored once it is done, so
# that what reads many experiments (a plan's trend) reads a row each, not all their runs.
ROWS = Fact("elapsed_rows", "after", "the elapsed-time rows as the report states them", list[stats.Summary])


def _family(
    runs: list[RunRecord], baseline: str, stacks: list[str], workloads: list[str], design: stats.Design
) -> list[stats.Summary]:
    return stats.summaries(runs, baseline, stacks, workloads, [METRIC], design=design)


def _reps(runs: list[RunRecord], workloads: list[str]) -> dict[str, int]:
    measured = [r for r in runs if not r.warmup and r.ok]
    return {w: 1 + max((r.rep for r in measured if r.workload == w), default=-1) for w in workloads}


@dataclass(frozen=True)
class Context:
    """What a look needs to know of the experiment."""

    baseline: str
    stacks: list[str]
    workloads: list[str]
    design: stats.Design
    max_reps: int
    seed: int
    threshold: float | None = None  # the plan's: a comparison closes on this side or that of it


def closes(row: stats.Summary, threshold: float | None) -> bool:
    """Whether a look closes this comparison: decided by the two-sided test (slower, faster,
    equivalent), or, with a threshold, its interval wholly above or below 1 + threshold."""
    if threshold is None:
        return row.decision in DECIDED
    low, high = row.ratio_ci_low, row.ratio_ci_high
    return low is not None and high is not None and (low > 1 + threshold or high < 1 + threshold)


def look(
    runs: list[RunRecord],
    state: State,
    context: Context,
    *,
    elapsed_s: float,
    trial_seconds: dict[tuple[str, str], float],
) -> list[tuple[str, str, int]]:
    """Take the next look at the runs so far (recorded in state) and return the (stack,
    workload, rep) of the rounds to run before the next one; empty when the rounds stop."""
    number = len(state.looks) + 1
    design = stats.Design(
        state.alpha_per_look, context.design.correction, context.design.equivalence, context.design.paired
    )
    rows = _family(runs, context.baseline, context.stacks, context.workloads, design)
    already = state.closed()
    closed = [
        (r.stack, r.workload)
        for r in rows
        if r.stack != context.baseline
        and closes(r, context.threshold)
        and (r.stack, r.workload) not in already
    ]
    reps = _reps(runs, context.workloads)
    state.looks.append(Look(number, state.alpha_per_look, sorted({r.trial for r in runs}), reps, closed))
    still_open = {
        (r.stack, r.workload)
        for r in rows
        if r.stack != context.baseline and (r.stack, r.workload) not in already | set(closed)
    }
    if not still_open:
        state.stopped = "every comparison decided"
        return []
    if number >= state.looks_planned:
        state.stopped = f"all {state.looks_planned} looks taken"
        return []
    return _rounds(still_open, reps, state, context, elapsed_s, trial_seconds)


def _rounds(
    still_open: set[tuple[str, str]],
    reps: dict[str, int],
    state: State,
    context: Context,
    elapsed_s: float,
    trial_seconds: dict[tuple[str, str], float],
) -> list[tuple[str, str, int]]:
    """The next look's rounds, as many as the time left holds (at least one, or none)."""
    wanted: dict[str, int] = {}
    for workload in context.workloads:
        if any(pair[1] == workload for pair in still_open):
            target = min(context.max_reps, max(reps[workload] + 1, math.ceil(reps[workload] * GROWTH)))
            if target > reps[workload]:
                wanted[workload] = target - reps[workload]
    if not wanted:
        state.stopped = f"max_reps = {context.max_reps} reached"
        return []

    def stacks_of(workload: str) -> list[str]:
        return [s for s in context.stacks if s == context.baseline or (s, workload) in still_open]

    def round_cost(workload: str) -> float:
        slowest = max(trial_seconds.values(), default=0.0)  # a pair not timed yet: the slowest
        return sum(trial_seconds.get((s, workload), slowest) for s in stacks_of(workload))

    left = math.inf if state.budget_s is None else state.budget_s - elapsed_s
    # Shrink the rounds evenly until they fit in the time left.
    while wanted and sum(n * round_cost(w) for w, n in wanted.items()) > left:
        largest = max(wanted, key=lambda w: wanted[w] * round_cost(w))
        wanted[largest] -= 1
        if wanted[largest] == 0:
            del wanted[largest]
    if not wanted:
        state.stopped = "budget spent"
        return []
    rng = random.Random(context.seed + 7919 * len(state.looks))
    trials = []
    for workload, count in wanted.items():
        for rep in range(reps[workload], reps[workload] + count):
            chosen = stacks_of(workload)
            trials += [(stack, workload, rep) for stack in rng.sample(chosen, len(chosen))]
    return trials


def summaries(
    runs: list[RunRecord],
    facts: Mapping[str, JSON],
    baseline: str,
    stacks: list[str],
    workloads: list[str],
    design: stats.Design,
    names: list[str] | None = None,
) -> list[stats.Summary]:
    """Every row of an experiment (stats.summaries), or only those of the metrics named;
    under a budget, each elapsed-time comparison as its look decided it: closed at the look
    that decided it, from the runs that look saw and at its level, or, still open, at the last
    look."""
    rows = stats.summaries(runs, baseline, stacks, workloads, names, design=design)
    state = STATE.read(facts)
    if state is None or not state.looks:
        return rows
    decided: dict[tuple[str, str], stats.Summary] = {}
    # Each comparison's miss chance summed over its looks: of the test's intervals, and of the
    # two one-sided tests' (an equivalent row shows one of the latter).
    spent: dict[tuple[str, str], float] = {}
    spent_tost: dict[tuple[str, str], float] = {}
    for number, taken in enumerate(state.looks, start=1):
        seen = set(taken.trials)
        at = stats.Design(taken.alpha, design.correction, design.equivalence, design.paired)
        family = _family([r for r in runs if r.trial in seen], baseline, stacks, workloads, at)
        last = number == len(state.looks)
        for row in family:
            pair = (row.stack, row.workload)
            if row.stack == baseline or pair in decided:
                continue
            missed = 1 - (row.ratio_ci_level or 1.0)
            spent[pair] = spent.get(pair, 0.0) + missed
            tost = missed if row.decision == "equivalent" else 2 * (row.tested_alpha or missed)
            spent_tost[pair] = spent_tost.get(pair, 0.0) + min(1.0, tost)
            if pair in taken.closed or last:
                decided[pair] = row
    for pair, row in decided.items():
        # The interval shown is one of those drawn at each look the comparison was open: it
        # misses the truth only if one of them did, so its level is what all of them spent.
        if row.ratio_ci_level is not None:
            used = spent_tost if row.decision == "equivalent" else spent
            row.ratio_ci_level = max(0.0, 1 - used[pair])
    return [
        decided.get((row.stack, row.workload), row) if row.metric == METRIC and row.stack != baseline else row
        for row in rows
    ]


def notes(facts: Mapping[str, JSON]) -> list[str]:
    """What the reports say about the looks: how many, at which level, and why they stopped."""
    state = STATE.read(facts)
    if state is None or not state.looks:
        return []
    budget = f"budget {state.budget_s:.0f} s; " if state.budget_s is not None else ""
    per_look = "; ".join(
        f"look {look.number} at {', '.join(f'{w} {n}' for w, n in look.reps.items())} repetitions"
        + (f" closed {', '.join(f'{s}/{w}' for s, w in look.closed)}" if look.closed else "")
        for look in state.looks
    )
    return [
        f"sequential: {budget}alpha {state.alpha:g} spent over at most {state.looks_planned} looks, "
        f"{state.alpha_per_look:.4g} each (Bonferroni over looks, Holm within one); {per_look}; "
        f"rounds stopped: {state.stopped or 'still running'}"
    ]


class ExperimentPlan(stats.DesignedPlan, Protocol):
    """What these functions read of the plan an experiment ran (the store's StoredPlan)."""

    @property
    def stacks(self) -> Mapping[str, Any]: ...
    @property
    def workloads(self) -> Mapping[str, Any]: ...


class StoredExperiment(Protocol):
    """What these functions read of a stored experiment (the store's ExperimentRecord)."""

    @property
    def plan(self) -> ExperimentPlan: ...
    @property
    def baseline(self) -> str: ...
    @property
    def facts(self) -> Mapping[str, JSON]: ...


def elapsed_rows(experiment: StoredExperiment, runs: list[RunRecord]) -> list[stats.Summary]:
    """A stored experiment's elapsed-time rows, as its report states them (summaries, under
    the design of its plan)."""
    plan = experiment.plan
    return summaries(
        runs,
        experiment.facts,
        experiment.baseline,
        list(plan.stacks),
        list(plan.workloads),
        stats.Design.of_plan(plan),
        [METRIC],  # the other metrics' rows cost 30x as much, and nothing reads them in bulk
    )


def experiment_rows(experiment: StoredExperiment, runs: Callable[[], list[RunRecord]]) -> list[stats.Summary]:
    """The rows the experiment stored when it ended, or, stored before they were (or not
    ended), computed from its runs."""
    rows = ROWS.read(experiment.facts)
    return rows if rows is not None else elapsed_rows(experiment, runs())
