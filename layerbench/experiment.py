"""An experiment: a plan's trials in order, one at a time, each run stored as it ends.

check (tools, permissions, fetch what the workloads need) -> schedule (warm-ups first,
interleaved or sequential, seeded) -> for each trial: the executor runs it (here: build the
stack, prepare the workload, drop caches, timed run, tear down) and hands back one
TrialResult -> store it -> re-run a disturbed one, add an adaptive round -> mark done.
"""

import random
import time
from collections.abc import Callable

from layerbench import __version__, stats
from layerbench.core.errors import UserError
from layerbench.executors.base import Executor, HostLost, Setting
from layerbench.observe import sentinel
from layerbench.plan import Plan, footprint, parse_plan
from layerbench.plan.schedule import Trial, schedule
from layerbench.stats import adaptive, sequential
from layerbench.store import Store, StoreLost, now
from layerbench.store.records import TrialResult
from layerbench.workloads.base import Workload, WorkloadOptions
from layerbench.workloads.base import make_workloads as _make_workloads

__all__ = ["Experiment", "Trial", "make_workloads", "schedule"]


def make_workloads(plan: Plan) -> dict[str, Workload[WorkloadOptions]]:
    return _make_workloads(plan.workloads, footprint.reference_size(plan.stacks))


ProgressCallback = Callable[[Trial, int, TrialResult | None], None]


class Experiment:
    """One execution of a plan, stored under an id, its trials run by an executor."""

    def __init__(
        self,
        plan: Plan,
        store: Store,
        executor: Executor,
        *,
        seed: int | None = None,
        fleet: str | None = None,
        host_name: str | None = None,
    ) -> None:
        self.plan = plan
        self.fleet = fleet  # the fleet it is one host's part of, and that host
        self.host_name = host_name
        self.store = store
        self.executor = executor
        if seed is None:
            seed = plan.seed if plan.seed is not None else random.SystemRandom().randrange(2**31)
        self.seed = seed
        self.workloads = make_workloads(plan)
        self.trials = schedule(plan, self.seed)
        self.id: int | None = None
        self._stacks_seen: set[str] = set()
        self._finished: set[int] = set()  # trial indices already stored (when resuming)
        self._disturbed: dict[tuple[str, str], list[bool]] = {}  # per measured run so far: disturbed?
        self._probe = _ProbeClock()
        self._trial_seconds: dict[tuple[str, str], list[float]] = {}  # per pair: each trial's time
        self._sequential: sequential.State | None = None  # a budgeted experiment's looks so far
        self._started = time.monotonic()

    @classmethod
    def resume(cls, store: Store, executor: Executor, experiment_id: int) -> "Experiment":
        """The stored experiment, ready to run only the trials it is missing."""
        record = store.experiment(experiment_id)
        if record.status == "done":
            raise UserError(f"experiment {experiment_id} is complete; nothing to resume")
        if record.status == "running":
            raise UserError(f"experiment {experiment_id} is still running (pid {record.pid})")
        options = record.plan.run_options
        plan = parse_plan(
            record.plan_text,
            record.plan_source,
            quick=options.quick,
            reps=options.reps,
            budget=options.budget,
        )
        experiment = cls(
            plan, store, executor, seed=record.seed, fleet=record.fleet, host_name=record.host_name
        )
        experiment.id = experiment_id
        experiment._finished = {run.trial for run in store.runs(experiment_id)}
        experiment._stacks_seen = set(record.stacks)
        experiment._probe.seq = len(store.sentinels(experiment_id))
        if (state := sequential.STATE.read(record.facts)) is not None:
            experiment._sequential = state
        return experiment

    @property
    def missing_trials(self) -> list[Trial]:
        return [t for t in self.trials if t.index not in self._finished]

    def prepare(self, warnings: list[str] | Callable[[], list[str]]) -> None:
        """Checks and one-time preparation; nothing is written to the store before this.
        warnings: stored with a new experiment (a callable: asked for once the checks passed
        and the host is described, so a check that watches the machine for a while overlaps
        that work)."""
        self.executor.check(self.plan, self.workloads)
        if self.id is not None:  # resuming a stored experiment: its warnings are stored
            if callable(warnings):
                warnings()  # the caller shows them
            self.store.reopen_experiment(self.id)
            return
        host = self.executor.host()
        self.id = self.store.create_experiment(
            name=self.plan.name,
            plan_source=self.plan.source,
            plan_text=self.plan.text,
            plan=self.plan.as_dict(),
            seed=self.seed,
            baseline=self.plan.baseline,
            host=host,
            version=__version__,
            warnings=warnings() if callable(warnings) else warnings,
            fleet=self.fleet,
            host_name=self.host_name,
        )

    def run(self, progress: ProgressCallback | None = None) -> int:
        assert self.id is not None, "prepare() first"
        setting = Setting(self.plan, self.workloads, self.id)
        status, reason = "failed", None
        todo = self.missing_trials
        self._started = time.monotonic()
        try:
            self._sentinel(None, force=True)
            index = 0
            while index < len(todo):
                trial = todo[index]
                index += 1
                if progress:
                    progress(trial, len(todo), None)
                result = self.run_trial(trial, setting)
                self._sentinel(trial.index, force=False)
                if (again := self._rerun_of(result)) is not None:
                    self.trials.append(again)
                    todo.insert(index, again)
                if index == len(todo) and (self.plan.auto_reps or self.plan.budget_s is not None):
                    more = self._another_round() if self.plan.auto_reps else self._next_look()
                    self.trials += more
                    todo += more
                if progress:
                    progress(trial, len(todo), result)
            # Once more at the end, unless one just ran or the budget forbids it: an
            # experiment of a few seconds is over before drift within it could be read, and
            # a second probe would cost it several times the sentinel's share.
            if self._probe.trials_since and self._probe.due():
                self._sentinel(todo[-1].index, force=True)
            status = "done"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        except HostLost as lost:
            status, reason = "interrupted", lost.reason
            raise
        except StoreLost as lost:
            status, reason = "interrupted", f"the store went away ({lost.cause})"
            raise
        finally:
            try:
                self.executor.close()  # what it kept between trials (kept stacks)
            finally:
                self._finish(status, reason)
        return self.id

    def _finish(self, status: str, reason: str | None) -> None:
        """Mark the experiment's end. Ending on an error (any status but done), a store that
        cannot be reached to say so must not hide that error: the experiment stays running,
        and the next run or clean marks it interrupted once the store is back."""
        assert self.id is not None
        try:
            # Below that many runs a reader computes the rows about as fast as it reads them,
            # and an experiment of a few seconds is spared the statistics' import (~1 s).
            if status == "done" and self.store.run_count(self.id) >= sequential.STORED_ROWS_MIN_RUNS:
                rows = sequential.elapsed_rows(self.store.experiment(self.id), self.store.runs(self.id))
                self.store.set_experiment_fact(self.id, sequential.ROWS.key, [r.as_dict() for r in rows])
            self.store.finish_experiment(self.id, status, reason)
        except StoreLost:
            if status == "done":
                raise

    def run_trial(self, trial: Trial, setting: Setting) -> TrialResult:
        assert self.id is not None
        began = time.monotonic()
        result = self.executor.run(trial, setting)
        if not trial.warmup:
            self._trial_seconds.setdefault((trial.stack, trial.workload), []).append(time.monotonic() - began)
        if result.stack is not None and trial.stack not in self._stacks_seen:
            self.store.set_stack_info(self.id, trial.stack, result.stack.as_dict())
            self._stacks_seen.add(trial.stack)
        self.store.add_run(self.id, result)
        return result

    def _sentinel(self, after_trial: int | None, *, force: bool) -> None:
        """The drift probe between trials, outside every timed run, within its budget."""
        assert self.id is not None
        if not self.plan.sentinel or not self._probe.wanted(force):
            return
        taken = now()
        found = self.executor.sentinel()
        if found is None:
            return
        parts, cost_s = found
        self.store.add_sentinel(self.id, sentinel.Sample(self._probe.seq, taken, after_trial, parts, cost_s))
        self._probe.took(cost_s)

    def _rerun_of(self, result: TrialResult) -> Trial | None:
        """A measured run that other work disturbed is kept (flagged, out of the statistics)
        and its trial runs again, up to rerun_disturbed times; not when most of the pair's
        runs are flagged (then it is the stack's own kernel threads, see stats)."""
        trial = result.trial
        if trial.warmup:
            return None
        flags = self._disturbed.setdefault((trial.stack, trial.workload), [])
        flags.append(result.disturbed)
        if not flags[-1] or trial.rerun >= self.plan.rerun_disturbed:
            return None
        if len(flags) > 1 and stats.most_flagged(flags):  # a first disturbed run is always re-run
            return None
        index = 1 + max(t.index for t in self.trials)
        return Trial(index, trial.stack, trial.workload, trial.rep, False, trial.rerun + 1)

    def _next_look(self) -> list[Trial]:
        """A budget: look at the comparisons so far; the rounds that the open ones get."""
        assert self.id is not None and self.plan.budget_s is not None
        runs = self.store.runs(self.id)
        state = self._sequential or sequential.State(self.plan.alpha, self.plan.looks, self.plan.budget_s)
        self._sequential = state
        context = sequential.Context(
            baseline=self.plan.baseline,
            stacks=list(self.plan.stacks),
            workloads=list(self.plan.workloads),
            design=stats.Design.of_plan(self.plan),
            max_reps=self.plan.max_reps,
            seed=self.seed,
            threshold=self.plan.threshold,
        )
        seconds = {pair: sorted(times)[len(times) // 2] for pair, times in self._trial_seconds.items()}
        wanted = sequential.look(
            runs, state, context, elapsed_s=time.monotonic() - self._started, trial_seconds=seconds
        )
        self.store.set_experiment_fact(self.id, sequential.STATE.key, state.as_fact())
        first = max([len(self.trials), *(run.trial + 1 for run in runs)])
        return [
            Trial(first + i, stack, workload, rep, False) for i, (stack, workload, rep) in enumerate(wanted)
        ]

    def _another_round(self) -> list[Trial]:
        """reps = "auto": the next interleaved round for the comparisons still undecided."""
        assert self.id is not None
        runs = self.store.runs(self.id)
        wanted, state = adaptive.next_round(
            runs,
            baseline=self.plan.baseline,
            stacks=list(self.plan.stacks),
            workloads=list(self.plan.workloads),
            target=self.plan.target_ci,
            max_reps=self.plan.max_reps,
            seed=self.seed,
            design=stats.Design.of_plan(self.plan),
        )
        self.store.set_experiment_fact(self.id, adaptive.STATE.key, adaptive.as_fact(state))
        # A resumed experiment may already hold runs of rounds added before it stopped.
        first = max([len(self.trials), *(run.trial + 1 for run in runs)])
        return [
            Trial(first + i, stack, workload, rep, False) for i, (stack, workload, rep) in enumerate(wanted)
        ]


class _ProbeClock:
    """When the next sentinel is due: after any trial, once the time since the last probe
    keeps the sentinel within its budget (sentinel.BUDGET of the experiment's time)."""

    def __init__(self) -> None:
        self.seq = 0
        self.trials_since = 0
        self.last_at = time.monotonic()
        self.last_cost_s = 0.0

    def wanted(self, force: bool) -> bool:
        if force:
            return True
        self.trials_since += 1
        return self.due()

    def due(self) -> bool:
        return sentinel.due(time.monotonic() - self.last_at, self.last_cost_s)

    def took(self, cost_s: float) -> None:
        self.seq += 1
        self.trials_since = 0
        self.last_at = time.monotonic()
        self.last_cost_s = cost_s
