"""One comparison of a bisect: the candidate against the current good end, one experiment.

Both sides run interleaved and paired by repetition under the plan's sequential design,
with the bisect's margin as the threshold: the experiment adds rounds until the ratio's
interval lies wholly above 1 + margin (`slower`) or wholly below it (`not slower`), or its
budget is spent (`undecided`). A candidate that does not build, or whose runs fail, is
`skipped`. Each comparison is stored (as an experiment, and in the bisect's log) as it ends."""

import time
from collections.abc import Callable
from dataclasses import dataclass

from layerbench.bisect.search import Verdict
from layerbench.bisect.spec import BisectPlan
from layerbench.bisect.variants import Builds
from layerbench.core.errors import UserError
from layerbench.experiment import Experiment
from layerbench.session import Session
from layerbench.stats import sequential
from layerbench.store.records import BisectState, BisectStep, BisectVariant


@dataclass
class Comparisons:
    """The search's oracle: a stored answer when the bisect is resumed, else a measurement."""

    session: Session
    plan: BisectPlan
    state: BisectState
    builds: Builds
    save: Callable[[], None]  # the state, into the store
    say: Callable[[str], None]
    bisect: int

    def __call__(self, reference: int, candidate: int) -> Verdict:
        known = self.state.step(reference, candidate)
        if known is not None:  # measured before the bisect was stopped
            return known.verdict  # type: ignore[return-value]
        step = self._measure(reference, candidate)
        self.state.steps.append(step)
        self.save()
        self.say(line(self.state, step))
        return step.verdict  # type: ignore[return-value]

    def _side(self, variant: BisectVariant) -> tuple[str, dict[str, object]] | None:
        before = variant.build
        checkout = self.builds.checkout(variant)
        if variant.build != before:
            self.save()  # how its build went
        if variant.build != "ok":
            return None
        values = next((v.set for v in self.plan.spec.variants or [] if v.name == variant.name), None)
        table = self.plan.stack_of(
            variant.label, checkout=None if checkout is None else str(checkout), set_values=values
        )
        return variant.label, table

    def _measure(self, reference: int, candidate: int) -> BisectStep:
        began = time.monotonic()
        step = BisectStep(reference=reference, candidate=candidate, verdict="skipped")
        sides = []
        for index in (reference, candidate):
            variant = self.state.variants[index]
            side = self._side(variant)
            if side is None and index == reference:
                raise UserError(f"variant {variant.label}, a good end, does not build now: {variant.build}")
            if side is None:
                step.note = f"{variant.label} does not build: {variant.build}"
                step.seconds = time.monotonic() - began
                return step
            sides.append(side)
        store = self.session.store
        assert store is not None
        experiment = Experiment(
            self.plan.check_comparison(self.plan.comparison(sides[0], sides[1])), store, self.session.executor
        )
        experiment.prepare(list(self.session.warnings))
        assert experiment.id is not None
        step.experiment = experiment.id
        self.session.scratch.describe_holder(
            f"layerbench bisect {self.bisect}: {sides[1][0]} against {sides[0][0]}, "
            f"experiment {experiment.id}"
        )
        experiment.run()
        self._read(step, experiment.id, sides[1][0])
        step.seconds = time.monotonic() - began
        return step

    def _read(self, step: BisectStep, experiment: int, candidate: str) -> None:
        """The verdict from the candidate's elapsed-time row, as its look closed it."""
        store = self.session.store
        assert store is not None
        runs, record = store.runs(experiment), store.experiment(experiment)
        rows = sequential.elapsed_rows(record, runs)
        row = next((r for r in rows if r.stack == candidate and r.metric == sequential.METRIC), None)
        if row is None or row.ratio is None or row.ratio_ci_low is None or row.ratio_ci_high is None:
            failed = [r.error for r in runs if not r.ok and r.error]
            step.note = f"its runs failed: {failed[0]}" if failed else "no runs to compare"
            return
        step.ratio, step.low, step.high = row.ratio, row.ratio_ci_low, row.ratio_ci_high
        step.level, step.reps = row.ratio_ci_level, row.n
        threshold = 1 + self.state.margin
        if step.low > threshold:
            step.verdict = "slower"
        elif step.high < threshold:
            step.verdict = "not slower"
        else:
            step.verdict = "undecided"
            stopped = sequential.STATE.read(record.facts)
            why = stopped.stopped if stopped is not None and stopped.stopped else "its budget spent"
            step.note = f"its interval holds x{threshold:.2f} after {row.n} repetitions ({why})"


def line(state: BisectState, step: BisectStep) -> str:
    """A comparison in one line, as the bisect goes."""
    candidate, reference = state.variants[step.candidate], state.variants[step.reference]
    figures = ""
    if step.ratio is not None:
        figures = f" x{step.ratio:.2f} [{step.low:.2f}-{step.high:.2f}] over {step.reps} repetitions,"
    where = f" (experiment {step.experiment})" if step.experiment is not None else ""
    note = f": {step.note}" if step.note else ""
    return (
        f"{candidate.label} against {reference.label}:{figures} {step.verdict}{note}, "
        f"{step.seconds:.0f} s{where}"
    )
