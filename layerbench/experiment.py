"""An experiment: a plan's trials in order, one at a time, each run stored as it ends.

prepare (check tools, pack archives) -> schedule (warm-ups first, interleaved or
sequential, seeded) -> for each trial: build stack, prepare workload, drop caches,
timed run, store, tear down -> mark the experiment done.
"""

import contextlib
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerbench import __version__, adaptive, failpoints, host, measure, stats, worlds
from layerbench.errors import SetupError, UserError
from layerbench.guest import machine
from layerbench.plan import Plan, parse_plan
from layerbench.scratch import Scratch
from layerbench.stacks.base import LAYER_KINDS, BuildContext, Layer, build_stack
from layerbench.store import Store, now
from layerbench.workloads.base import WORKLOAD_KINDS, Workload


@dataclass(frozen=True)
class Trial:
    index: int
    stack: str
    workload: str
    rep: int  # 0-based among measured runs; warm-ups count separately
    warmup: bool
    rerun: int = 0  # a re-run of a disturbed trial: 1, 2 ...


def make_layers(plan: Plan, stack: str) -> list[Layer]:
    return [
        LAYER_KINDS[options.kind](options, index) for index, options in enumerate(plan.stacks[stack], start=1)
    ]


def make_workloads(plan: Plan) -> dict[str, Workload]:
    workloads = {
        name: WORKLOAD_KINDS[options.kind](options, name) for name, options in plan.workloads.items()
    }
    sizes = [
        size
        for stack in plan.stacks
        for layer in make_layers(plan, stack)
        if (size := layer.fs_size()) is not None
    ]
    for workload in workloads.values():
        if hasattr(workload, "reference_fs_size"):
            workload.reference_fs_size = min(sizes) if sizes else None  # type: ignore[attr-defined]
    return workloads


def check_host(
    plan: Plan,
    workloads: dict[str, Workload],
    allowed_devices: frozenset[str] = frozenset(),
    force: bool = False,
) -> None:
    """Everything the plan needs is installed and allowed, or one line says what to do."""
    if os.geteuid() != 0:
        raise UserError("layerbench needs root to mount file systems and drop caches; run it as root")
    for stack, layers in plan.stacks.items():
        for options in layers:
            lacks = LAYER_KINDS[options.kind].missing(options)
            if lacks:
                raise UserError(f"stack {stack}: layer {options.kind} needs {lacks[0]}")
        for layer in make_layers(plan, stack):
            refusal = layer.refusal(allowed_devices, force)
            if refusal:
                raise UserError(f"stack {stack}: {refusal}")
    for name, workload in workloads.items():
        lacks = workload.missing(workload.options)
        if lacks:
            raise UserError(f"workload {name}: needs {lacks[0]}")


def schedule(plan: Plan, seed: int) -> list[Trial]:
    """Warm-ups first for every pair, then the measured repetitions. Interleaved order
    shuffles the stacks within each repetition so drift hits every stack alike."""
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


ProgressCallback = Callable[[Trial, int, dict[str, Any] | None], None]


class Experiment:
    """One execution of a plan, stored under an id."""

    def __init__(
        self,
        plan: Plan,
        store: Store,
        scratch: Scratch,
        *,
        seed: int | None = None,
        allowed_devices: frozenset[str] = frozenset(),
        force: bool = False,
    ) -> None:
        self.plan = plan
        self.allowed_devices = allowed_devices
        self.force = force
        self.store = store
        self.scratch = scratch
        if seed is None:
            seed = plan.seed if plan.seed is not None else random.SystemRandom().randrange(2**31)
        self.seed = seed
        self.workloads = make_workloads(plan)
        self.trials = schedule(plan, self.seed)
        self.id: int | None = None
        self._stacks_seen: set[str] = set()
        self._finished: set[int] = set()  # trial indices already stored (when resuming)
        self.world_dirs: dict[str, Path] = {}
        self._disturbed: dict[tuple[str, str], list[bool]] = {}  # per measured run so far: disturbed?

    @classmethod
    def resume(cls, store: Store, scratch: Scratch, experiment_id: int, **permissions: Any) -> "Experiment":
        """The stored experiment, ready to run only the trials it is missing."""
        record = store.experiment(experiment_id)
        if record["status"] == "done":
            raise UserError(f"experiment {experiment_id} is complete; nothing to resume")
        if record["status"] == "running":
            raise UserError(f"experiment {experiment_id} is still running (pid {record['pid']})")
        options = record["plan"].get("run_options", {})
        plan = parse_plan(
            record["plan_text"],
            record["plan_source"],
            quick=options.get("quick", False),
            reps=options.get("reps"),
        )
        experiment = cls(plan, store, scratch, seed=record["seed"], **permissions)
        experiment.id = experiment_id
        experiment._finished = {run["trial"] for run in store.runs(experiment_id)}
        experiment._stacks_seen = set(record["stacks"])
        return experiment

    @property
    def missing_trials(self) -> list[Trial]:
        return [t for t in self.trials if t.index not in self._finished]

    def prepare(self, warnings: list[str]) -> None:
        """Checks and one-time preparation; nothing is written to the store before this."""
        check_host(self.plan, self.workloads, self.allowed_devices, self.force)
        self.world_dirs = {stack: worlds.resolve(spec) for stack, spec in self.plan.worlds.items()}
        for workload in self.workloads.values():
            if hasattr(workload, "archive"):
                workload.archive  # noqa: B018 - packs a built-in archive once, untimed
            workload.fetch()
        if self.id is not None:  # resuming a stored experiment
            self.store.reopen_experiment(self.id)
            return
        self.id = self.store.create_experiment(
            name=self.plan.name,
            plan_source=self.plan.source,
            plan_text=self.plan.text,
            plan=self.plan.as_dict(),
            seed=self.seed,
            baseline=self.plan.baseline,
            host=host.describe(self.scratch.root),
            version=__version__,
            warnings=warnings,
        )

    def run(self, progress: ProgressCallback | None = None) -> int:
        assert self.id is not None, "prepare() first"
        status = "failed"
        todo = self.missing_trials
        try:
            index = 0
            while index < len(todo):
                trial = todo[index]
                index += 1
                if progress:
                    progress(trial, len(todo), None)
                row = self.run_trial(trial)
                if (again := self._rerun_of(trial, row)) is not None:
                    self.trials.append(again)
                    todo.insert(index, again)
                if index == len(todo) and self.plan.auto_reps:
                    more = self._another_round()
                    self.trials += more
                    todo += more
                if progress:
                    progress(trial, len(todo), row)
            status = "done"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            self.store.finish_experiment(self.id, status)
        return self.id

    def run_trial(self, trial: Trial) -> dict[str, Any]:
        assert self.id is not None
        workload = self.workloads[trial.workload]
        started = now()
        facts: dict[str, Any] = {}
        with self.scratch.directory("trials", f"e{self.id}-t{trial.index}") as workdir:
            try:
                with contextlib.ExitStack() as resources:
                    ctx = BuildContext(
                        scratch=self.scratch,
                        workdir=workdir,
                        allowed_devices=self.allowed_devices,
                        force=self.force,
                        world=self.world_dirs.get(trial.stack),
                    )
                    built = resources.enter_context(build_stack(ctx, make_layers(self.plan, trial.stack)))
                    failpoints.reached("stack-built")
                    devices = built.devices()
                    if trial.stack not in self._stacks_seen:
                        self._record_stack(trial.stack, built, devices)
                    if built.elsewhere is not None:  # a vm layer: the rest runs in the guest
                        counters, prepared = machine.run_elsewhere(built, workload, devices)
                    else:
                        prepared = workload.prepare(ctx, built, resources)
                        if prepared.drop_caches:
                            measure.drop_caches()
                        else:
                            os.sync()
                        child = resources.enter_context(self._journaled_child(trial))
                        counters = measure.run_timed(
                            prepared.argv,
                            cwd=prepared.cwd,
                            env=prepared.env,
                            timeout=workload.options.timeout,
                            devices=devices,
                            helper_pids=built.helper_pids,
                            stderr_path=workdir / "stderr",
                            on_start=child,
                            cgroups=built.cgroup_procs,
                            cpus=self.plan.cpus,
                        )
                        prepared.collect()
                    failpoints.reached("run-finished")
                    facts.update(prepared.facts)
                row = counters.as_row()
                if counters.status == "ok" and prepared.units and counters.wall_s > 0:
                    row["units"], row["unit"] = prepared.units, prepared.unit
                    row["throughput"] = prepared.units / counters.wall_s
            except SetupError as exc:
                row = measure.failed(f"setup: {exc}").as_row()
        row.update(
            trial=trial.index,
            stack=trial.stack,
            workload=trial.workload,
            rep=trial.rep,
            warmup=int(trial.warmup),
            started=started,
        )
        if sampler_cost := row.pop("sampler", None):
            facts["sampler"] = sampler_cost
        facts.update(row.pop("facts", {}))
        if trial.rerun:
            facts["rerun"] = trial.rerun
        self.store.add_run(self.id, row, row.pop("devices"), facts, row.pop("samples", []))
        row["disturbed"] = bool(facts.get("disturbed"))
        return row

    def _rerun_of(self, trial: Trial, row: dict[str, Any]) -> Trial | None:
        """A measured run that other work disturbed is kept (flagged, out of the statistics)
        and its trial runs again, up to rerun_disturbed times."""
        if trial.warmup:
            return None
        flags = self._disturbed.setdefault((trial.stack, trial.workload), [])
        flags.append(bool(row.get("disturbed")))
        if not flags[-1] or trial.rerun >= self.plan.rerun_disturbed:
            return None
        if 2 * sum(flags) > len(flags) and len(flags) > 1:
            return None  # most of this pair's runs are flagged: its own kernel threads, not noise
        index = 1 + max(t.index for t in self.trials)
        return Trial(index, trial.stack, trial.workload, trial.rep, False, trial.rerun + 1)

    @contextlib.contextmanager
    def _journaled_child(self, trial: Trial) -> Iterator[Callable[[int], None]]:
        """The timed child's process group goes into the journal, so that after a SIGKILL
        of layerbench `clean` can stop it (it would keep the stack's mounts busy)."""
        idents: list[int] = []

        def started(pid: int) -> None:
            idents.append(self.scratch.journal.add("group", f"run of trial {trial.index}", pgid=pid))
            failpoints.reached("run-started")

        try:
            yield started
        finally:
            for ident in idents:
                self.scratch.journal.done(ident)

    def _another_round(self) -> list[Trial]:
        """reps = "auto": the next interleaved round for the ratios still too wide."""
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
            design=stats.Design.of_plan(self.plan.as_dict()),
        )
        self.store.set_experiment_fact(self.id, adaptive.FACT, state)
        # A resumed experiment may already hold runs of rounds added before it stopped.
        first = max([len(self.trials), *(run["trial"] + 1 for run in runs)])
        return [
            Trial(first + i, stack, workload, rep, False) for i, (stack, workload, rep) in enumerate(wanted)
        ]

    def _record_stack(self, name: str, built: Any, devices: list[str]) -> None:
        assert self.id is not None
        layers = make_layers(self.plan, name)
        self.store.set_stack_info(
            self.id,
            name,
            {
                "layers": [layer.describe() for layer in layers] or ["dir (scratch root)"],
                "mount_lines": built.mount_lines,
                "devices": devices,
                "top": str(Path(built.top).relative_to(self.scratch.root)),
                "world": str(self.world_dirs[name]) if name in self.world_dirs else None,
            },
        )
        self._stacks_seen.add(name)
