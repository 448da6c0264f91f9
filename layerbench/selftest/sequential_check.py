"""The simulation study of a budget's sequential design (sequential.py), run through the
very code an experiment uses: simulated runs go through sequential.look after every batch
of rounds until it stops, and sequential.summaries gives the comparisons as the report
shows them. Experiments are shaped like the default one (3 stacks x 3 workloads against a
baseline, paired by repetition, log-normal wall times) and get no time limit, so they take
every look they can: the error rates measured are those of the most looking.

- false alarms: A/A experiments with at least one comparison decided slower or faster;
- false "equivalent": one comparison's true ratio lies on the margin (1 + equivalence),
  and it is called equivalent;
- coverage: the share of the reported intervals that hold the true ratio, against the
  level they state.
Each with its Monte-Carlo error; `layerbench selftest` prints them, docs/statistics.md
has a run of them."""

import math
from dataclasses import dataclass

import numpy as np

from layerbench import stats
from layerbench.core.runs import RunRecord
from layerbench.selftest.check import Check
from layerbench.stats import sequential

WORKLOADS, STACKS = 3, 3
BASELINE = "base"
FIRST_REPS = 5
MAX_REPS = 30


@dataclass(frozen=True)
class Noise:
    name: str
    shared_sd: float  # log-scale drift every stack shares within one repetition
    own_sd: float  # each run's own


NOISES = (
    Noise("each run's own noise 5 %", 0.0, 0.05),
    Noise("shared drift 5 %, own noise 1 %", 0.05, 0.01),
)


@dataclass
class Outcome:
    rows: list[stats.Summary]
    looks: int
    reps: int


def simulate(rng: np.random.Generator, noise: Noise, effects: dict[tuple[str, str], float]) -> Outcome:
    """One budgetless sequential experiment; effects: (stack, workload) -> true ratio."""
    stacks = [BASELINE, *(f"s{s}" for s in range(STACKS))]
    workloads = [f"w{w}" for w in range(WORKLOADS)]
    design = stats.Design(paired=True)
    context = sequential.Context(BASELINE, stacks, workloads, design, MAX_REPS, seed=int(rng.integers(2**31)))
    drift = rng.normal(0.0, noise.shared_sd, (WORKLOADS, MAX_REPS)) if noise.shared_sd else None
    runs: list[RunRecord] = []

    def add(stack: str, workload: str, rep: int) -> None:
        w = workloads.index(workload)
        log_value = math.log(effects.get((stack, workload), 1.0)) + rng.normal(0.0, noise.own_sd)
        if drift is not None:
            log_value += drift[w, rep]
        runs.append(
            RunRecord(len(runs), stack, workload, "ok", rep=rep, values={"wall_s": math.exp(log_value)})
        )

    for rep in range(FIRST_REPS):
        for workload in workloads:
            for stack in stacks:
                add(stack, workload, rep)
    state = sequential.State(design.alpha, stats.LOOKS, None)
    while wanted := sequential.look(runs, state, context, elapsed_s=0.0, trial_seconds={}):
        for stack, workload, rep in wanted:
            add(stack, workload, rep)
    rows = sequential.summaries(
        runs, {sequential.STATE.key: state.as_fact()}, BASELINE, stacks, workloads, design
    )
    headline = [r for r in rows if r.metric == sequential.METRIC and r.stack != BASELINE]
    return Outcome(headline, len(state.looks), 1 + max(r.rep for r in runs))


def _ceiling(alpha: float, experiments: int) -> tuple[float, str]:
    """The most a rate may read if the true rate is alpha: alpha plus three Monte-Carlo errors
    of a rate of alpha over these experiments (not of the rate read, whose error grows with
    it and would let a design that breaks the bound pass it)."""
    error = math.sqrt(alpha * (1 - alpha) / experiments)
    return alpha + 3 * error, f"need <= {alpha:.0%} + 3 x {error:.2%}, the Monte-Carlo error at {alpha:.0%}"


def _rate(hits: int, total: int) -> tuple[float, float]:
    share = hits / total if total else 0.0
    return share, math.sqrt(share * (1 - share) / total) if total else 0.0


def checks(experiments: int = 400, seed: int = 11, noises: tuple[Noise, ...] = NOISES) -> list[Check]:
    rng = np.random.default_rng(seed)
    alpha, margin = stats.ALPHA, stats.EQUIVALENCE
    ceiling, need = _ceiling(alpha, experiments)
    found: list[Check] = []
    for noise in noises:
        alarms = covered = intervals = 0
        level_sum = 0.0
        looks = reps = 0
        for _ in range(experiments):
            outcome = simulate(rng, noise, {})
            alarms += any(r.significant for r in outcome.rows)
            looks, reps = looks + outcome.looks, reps + outcome.reps
            for row in outcome.rows:
                if row.ratio_ci_low is not None and row.ratio_ci_high is not None and row.ratio_ci_level:
                    intervals += 1
                    covered += row.ratio_ci_low <= 1.0 <= row.ratio_ci_high
                    level_sum += row.ratio_ci_level
        rate, error = _rate(alarms, experiments)
        how = f"budget, {stats.LOOKS} looks, paired, {noise.name}"
        found.append(
            Check(
                f"A/A false alarms (simulated, {how})",
                f"{rate:.2%} ± {error:.2%} of {experiments} experiments had a comparison decided "
                f"slower or faster; {looks / experiments:.1f} looks and {reps / experiments:.1f} "
                f"repetitions on average ({need})",
                rate <= ceiling,
            )
        )
        share, error = _rate(covered, intervals)
        level = level_sum / intervals if intervals else 0.0
        found.append(
            Check(
                f"ratio interval coverage (simulated, {how})",
                f"{share:.2%} ± {error:.2%} of {intervals} intervals hold the true ratio; their stated "
                f"level averages {level:.2%} (need coverage >= level - 3 MC errors)",
                share >= level - 3 * error,
            )
        )
        on_margin = 0
        for _ in range(experiments):
            outcome = simulate(rng, noise, {("s0", "w0"): 1 + margin})
            on_margin += outcome.rows[0].decision == "equivalent"
        rate, error = _rate(on_margin, experiments)
        found.append(
            Check(
                f"false 'equivalent' at the margin (simulated, {how}, true ratio {1 + margin:.2f})",
                f"{rate:.2%} ± {error:.2%} of {experiments} experiments called it equivalent within "
                f"±{margin:.0%} ({need})",
                rate <= ceiling,
            )
        )
    return found
