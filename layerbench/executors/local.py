"""LocalExecutor: a trial on this host, in its scratch root. Build the stack fresh,
prepare the workload untimed, drop the caches, time the run, tear everything down. A stack
whose top layer runs the rest elsewhere (a vm) hands the trial to its guest. A workload with
keep_stack = true runs its repetitions on stacks built and prepared once (kept.py)."""

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from layerbench.content import worlds
from layerbench.core import failpoints
from layerbench.core.errors import SetupError, UserError
from layerbench.core.facts import Fact, declare
from layerbench.executors import kept, procedure
from layerbench.executors.base import Executor, Setting
from layerbench.guest.protocol import GuestRequest
from layerbench.linux import cgroups
from layerbench.observe import (
    cpu_speed,
    durability,
    host,
    kernelstats,
    measure,
    sentinel,
    settle,
    tracing,
    warm_memory,
)
from layerbench.observe.observer import Capture
from layerbench.observe.run_result import RunResult
from layerbench.plan import Plan
from layerbench.plan.schedule import Trial
from layerbench.scratch import Scratch
from layerbench.stacks.base import LAYER_KINDS, BuildContext, BuiltStack, build_stack, make_layers
from layerbench.store import now
from layerbench.store.records import StackRecord, TrialResult
from layerbench.workloads.base import Prepared, Workload, WorkloadOptions

PHASE_BUILD_S = Fact("phase_build_s", "before", "seconds building the stack", float)
PHASE_PREPARE_S = Fact("phase_prepare_s", "before", "seconds preparing the workload (untimed)", float)
PHASE_WARM_MEMORY_S = Fact("phase_warm_memory_s", "before", "seconds holding the run's memory warm", float)
PHASE_AROUND_RUN_S = Fact(
    "phase_around_run_s",
    "after",
    "seconds around the timed run: dropping caches, settling, reading the counters",
    float,
)
PHASE_TEARDOWN_S = Fact("phase_teardown_s", "after", "seconds tearing the trial down", float)
INODE_GROUP_FREED_S_AGO = Fact(
    "inode_group_freed_s_ago",
    "before",
    "seconds since a trial of this run ended near the inode group the trial's files start in "
    "(null: none in the last 365 s; an ext4 without a journal only, scratch/placement.py)",
    float,
)
PLACEMENT_TRIES = Fact(
    "placement_tries", "before", "trial directories made to find that group (scratch/placement.py)", int
)
declare(
    PHASE_BUILD_S,
    PHASE_PREPARE_S,
    PHASE_WARM_MEMORY_S,
    PHASE_AROUND_RUN_S,
    PHASE_TEARDOWN_S,
    INODE_GROUP_FREED_S_AGO,
    PLACEMENT_TRIES,
)


class _Phases:
    """Where a trial's seconds go outside its timed run (each trial's phase_*_s facts): every
    second of them is a repetition the time budget cannot buy."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.seconds: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        moment = time.monotonic()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + moment - self.last
        self.last = moment

    def facts(self, wall_s: float | None) -> dict[str, float]:
        """The laps, the run's lap less its timed wall time (dropping caches, settling, the
        gate, reading the counters) as `around_run`."""
        laps = dict(self.seconds)
        if "run" in laps:
            laps["around_run"] = max(0.0, laps.pop("run") - (wall_s or 0.0))
        return {f"phase_{name}_s": round(value, 4) for name, value in laps.items()}


class LocalExecutor(Executor):
    def __init__(
        self, scratch: Scratch, *, allowed_devices: frozenset[str] = frozenset(), force: bool = False
    ) -> None:
        self.scratch = scratch
        self.allowed_devices = allowed_devices
        self.force = force
        self.world_dirs: dict[str, Path] = {}
        self.scratch_disks = settle.scratch_devices(scratch.root)
        self._probes = 0
        self._free_page_reporting = kernelstats.FreePageReporting()
        self._warm_wanted = warm_memory.wanted()
        self._unsettled_in_a_row = 0
        self._kept = kept.KeptStacks()
        self._kept_dirs = 0

    def close(self) -> None:
        self._kept.close()

    def host(self) -> dict[str, Any]:
        return host.describe(self.scratch.root)

    def check(self, plan: Plan, workloads: dict[str, Workload[WorkloadOptions]]) -> None:
        """Everything the plan needs is installed and allowed, or one line says what to do;
        then the worlds are assembled and the workloads fetch what they need, untimed."""
        if os.geteuid() != 0:
            raise UserError("layerbench needs root to mount file systems and drop caches; run it as root")
        for stack, layers in plan.stacks.items():
            in_guest = False  # above a vm layer: built in its guest, on the guest's kernel
            for options in layers:
                kind = LAYER_KINDS[options.kind]
                if lacks := kind.missing(options, guest=in_guest):
                    raise UserError(f"stack {stack}: layer {options.kind} needs {lacks[0]}")
                in_guest = in_guest or kind.hosts_layers_above
            for layer in make_layers(layers):
                if refusal := layer.refusal(self.allowed_devices, self.force):
                    raise UserError(f"stack {stack}: {refusal}")
        for name, workload in workloads.items():
            if lacks := workload.missing(workload.options):
                raise UserError(f"workload {name}: needs {lacks[0]}")
        self.world_dirs = {stack: worlds.resolve(spec) for stack, spec in plan.worlds.items()}
        for workload in workloads.values():
            workload.fetch()

    def sentinel(self) -> tuple[dict[str, float], float] | None:
        self._probes += 1
        try:
            with self.scratch.directory("sentinel", f"p{os.getpid()}-{self._probes}", trial=False) as place:
                return sentinel.probe(place)
        except (OSError, SetupError):  # a full scratch file system: the trials will say so
            return None

    def run(self, trial: Trial, setting: Setting) -> TrialResult:
        if setting.workloads[trial.workload].options.keep_stack:
            return self._run_kept(trial, setting)
        started = now()
        clock = _Phases()
        try:
            with self.scratch.directory("trials", f"e{setting.experiment_id}-t{trial.index}") as workdir:
                placed = self.scratch.placed
                try:
                    result = self._run_in(trial, setting, workdir, started, clock)
                except SetupError as exc:
                    result = TrialResult(trial, started, measure.failed(f"setup: {exc}"))
                if placed is not None:
                    result.facts.update(
                        **{INODE_GROUP_FREED_S_AGO.key: placed.freed_s_ago, PLACEMENT_TRIES.key: placed.tries}
                    )
        finally:
            # The trial's files are gone now; their deletion is made durable here, in its own
            # teardown, not in the next trial's timed run (which still settles first).
            os.sync()
        clock.lap("teardown")
        result.facts.update(clock.facts(result.counters.wall_s))
        return result

    def _run_in(
        self, trial: Trial, setting: Setting, workdir: Path, started: str, clock: "_Phases"
    ) -> TrialResult:
        workload = setting.workloads[trial.workload]
        with contextlib.ExitStack() as resources:
            ctx = self._context(trial, workdir)
            layers = make_layers(setting.plan.stacks[trial.stack])
            warm = resources.enter_context(self._held_warm(setting, workload, layers))
            clock.lap("warm_memory")
            built = resources.enter_context(build_stack(ctx, layers))
            clock.lap("build")
            failpoints.reached("stack-built")
            devices = built.devices()
            record = self._record(trial.stack, layers, built, devices)
            if built.elsewhere is not None:  # a vm layer: the rest runs in a freshly booted guest
                warm.release()  # the guest's memory is the vm's own
                outcome, checked, still_dirty = self._run_in_guest(setting, built, devices, workload, workdir)
                clock.lap("run")
            else:
                checked = devices
                outcome = procedure.run_on_top(
                    workload,
                    ctx,
                    built,
                    resources,
                    lambda prepared: self._timed(
                        trial, setting, prepared, built, devices, workdir, resources, warm
                    ),
                    clock.lap,
                )
                still_dirty = outcome.dirty_below
            failpoints.reached("run-finished")
        return _trial_result(trial, started, outcome, record, checked, still_dirty)

    def _context(self, trial: Trial, workdir: Path) -> BuildContext:
        return BuildContext(
            scratch=self.scratch,
            workdir=workdir,
            allowed_devices=self.allowed_devices,
            force=self.force,
            world=self.world_dirs.get(trial.stack),
        )

    def _held_warm(
        self, setting: Setting, workload: Workload[WorkloadOptions], layers: list[Any]
    ) -> contextlib.AbstractContextManager[warm_memory.Held]:
        """What the run will take fresh, held from the trial's start until right before it."""
        wanted = workload.run_memory_bytes() if setting.plan.warm_memory and self._warm_wanted else 0
        return warm_memory.held(wanted, huge=not (layers and layers[-1].small_pages))

    def _run_kept(self, trial: Trial, setting: Setting) -> TrialResult:
        """A trial on its workload's kept stack (built and prepared by the first trial that
        needs it): the run, then what it added removed, as its teardown."""
        started = now()
        clock = _Phases()
        key = (setting.experiment_id, trial.stack, trial.workload)
        self._kept.only_for(setting.experiment_id)
        workload = setting.workloads[trial.workload]
        layers = make_layers(setting.plan.stacks[trial.stack])
        served: int | None = None
        first: dict[str, object] = {}
        try:
            with contextlib.ExitStack() as per_run:
                warm = per_run.enter_context(self._held_warm(setting, workload, layers))
                clock.lap("warm_memory")
                on = self._kept.get(key) or self._keep(trial, setting, key, layers, clock)
                served = on.served
                first = on.first_facts if served == 0 else {}
                try:
                    result = self._run_on_kept(trial, setting, on, started, per_run, warm, clock)
                    on.served += 1
                except BaseException:
                    self._kept.drop(key)  # in doubt: the next trial builds it afresh
                    raise
                try:
                    on.clear()
                except OSError:
                    self._kept.drop(key)  # what the run left stays: the next trial builds afresh
        except SetupError as exc:
            result = TrialResult(trial, started, measure.failed(f"setup: {exc}"))
        finally:
            os.sync()  # as after a fresh trial: the removal is made durable in its teardown
        clock.lap("teardown")
        result.facts.update(clock.facts(result.counters.wall_s))
        if served is not None:
            result.facts.update({**first, kept.RUNS_BEFORE.key: served})
        return result

    def _keep(
        self, trial: Trial, setting: Setting, key: kept.Key, layers: list[Any], clock: "_Phases"
    ) -> kept.Kept:
        """Build the stack and prepare the workload on it, to be kept."""
        with contextlib.ExitStack() as resources:
            self._kept_dirs += 1
            name = f"e{setting.experiment_id}-kept{self._kept_dirs}"
            workdir = resources.enter_context(self.scratch.directory("trials", name))
            placed = self.scratch.placed
            ctx = self._context(trial, workdir)
            built = resources.enter_context(build_stack(ctx, layers))
            clock.lap("build")
            failpoints.reached("stack-built")
            devices = built.devices()
            record = self._record(trial.stack, layers, built, devices)
            prepared = setting.workloads[trial.workload].prepare(ctx, built, resources)
            clock.lap("prepare")
            entries = frozenset(os.listdir(built.top))
            on = kept.Kept(resources.pop_all(), ctx, built, devices, record, prepared, entries)
            if placed is not None:  # read before the first run only: the others' is older
                on.first_facts = {
                    INODE_GROUP_FREED_S_AGO.key: placed.freed_s_ago,
                    PLACEMENT_TRIES.key: placed.tries,
                }
        self._kept.add(key, on)
        return on

    def _run_on_kept(
        self,
        trial: Trial,
        setting: Setting,
        on: kept.Kept,
        started: str,
        per_run: contextlib.ExitStack,
        warm: warm_memory.Held,
        clock: "_Phases",
    ) -> TrialResult:
        outcome = procedure.run_prepared(
            on.prepared.again(),
            on.ctx,
            on.built,
            lambda prepared: self._timed(
                trial, setting, prepared, on.built, on.devices, on.ctx.workdir, per_run, warm
            ),
            clock.lap,
        )
        failpoints.reached("run-finished")
        return _trial_result(trial, started, outcome, on.record, on.devices, outcome.dirty_below)

    def _run_in_guest(
        self,
        setting: Setting,
        built: BuiltStack,
        devices: list[str],
        workload: Workload[WorkloadOptions],
        workdir: Path,
    ) -> tuple[RunResult, list[str], int | None]:
        """The rest of the trial in the guest: its result, the devices its durability is
        checked on, and the bytes below its stack still dirty after the run."""
        assert built.elsewhere is not None
        settled = self._settle(setting, devices)  # the host's disks hold the guest's
        outcome = built.elsewhere.run(_guest_request(built, workload), devices, workload.options.timeout)
        outcome.facts.update(settled.facts())
        # The guest's counters name the host's devices under the guest disk "host:vda".
        checked = [f"host:{device}" for device in devices]
        # Dirty in the guest's page cache (its reading) or in the host's, on its way to the
        # disk image: both are short of the disk.
        host_dirty = procedure.dirty_below(workdir) if outcome.durable_bytes else None
        return outcome, checked, _known_sum(outcome.dirty_below, host_dirty)

    def _timed(
        self,
        trial: Trial,
        setting: Setting,
        prepared: Prepared,
        built: BuiltStack,
        devices: list[str],
        workdir: Path,
        resources: contextlib.ExitStack,
        warm: warm_memory.Held,
    ) -> measure.RunCounters:
        """The host's timed run, caches already dropped: settle, the child's control groups and
        journal entry; around it, each observer's capture (the memory handed back to the
        hypervisor, the memory held warm, a block trace if asked for) gives its facts."""
        prepared.facts.update(self._settle(setting, devices).facts())
        if setting.plan.wait_reporting_pass:
            prepared.facts.update(warm_memory.wait_for_reporting_pass(warm).facts())
        procs, pressure = self._pressure_group(built, workdir, resources)
        prepared.facts.update(cpu_speed.facts(setting.plan.cpus))  # last before the clock: a covariate
        with contextlib.ExitStack() as observing:
            captures: list[Capture] = [observing.enter_context(self._free_page_reporting.around())]
            warm.release()  # last: the run's first allocations take these pages back
            captures.append(warm)
            if setting.workloads[trial.workload].options.trace == "block":
                captures.append(observing.enter_context(tracing.block_trace(self.scratch, workdir)))
            counters = measure.run_timed(
                prepared.argv,
                cwd=prepared.cwd,
                env=prepared.env,
                timeout=setting.workloads[trial.workload].options.timeout,
                devices=devices,
                helper_pids=built.helper_pids,
                helper_group=built.helper_group,
                stderr_path=workdir / "stderr",
                on_start=resources.enter_context(self._journaled_child(trial)),
                on_running=lambda: failpoints.reached("run-started"),
                cgroups=procs,
                cpus=setting.plan.cpus,
                pressure_group=pressure,
                rss_dir=workdir,
            )
        for capture in captures:
            prepared.facts.update(capture.facts())
        return counters

    def _pressure_group(
        self, built: BuiltStack, workdir: Path, resources: contextlib.ExitStack
    ) -> tuple[list[Path], Path | None]:
        """The stack's groups plus a cgroup v2 group that holds only the timed child, whose
        pressure files give the run's own stall time (a throttle's group in that same tree
        already does: a process is in one group per tree)."""
        procs = list(built.cgroup_procs)
        tree = cgroups.pressure_hierarchy()
        if tree is None:
            return procs, None
        for existing in procs:
            if tree.mount_point in existing.parents:
                return procs, existing.parent
        try:
            group = resources.enter_context(self.scratch.cgroup(tree, f"{workdir.name}-run"))
        except SetupError:
            return procs, None  # the run is measured without its own pressure (system-wide PSI)
        return [*procs, group / "cgroup.procs"], group

    def _settle(self, setting: Setting, devices: list[str]) -> settle.Settled:
        """Quiet devices under the scratch root and the stack before the timed run. Devices
        that stayed busy through the whole of the last trial's wait are busy with work
        that is not ours (another program writing): a full wait buys nothing there, so the
        next waits are cut short until one finds the devices quiet again (the run says so)."""
        timeout, cut = setting.plan.settle_timeout, self._unsettled_in_a_row >= settle.GIVE_UP_AFTER
        if cut:
            timeout = min(timeout, settle.CUT_TIMEOUT_S)
        settled = settle.wait_quiet(
            sorted({*devices, *self.scratch_disks}), quiet_s=setting.plan.settle, timeout_s=timeout
        )
        self._unsettled_in_a_row = self._unsettled_in_a_row + 1 if settled.timed_out else 0
        return dataclasses.replace(settled, cut_short=cut)

    def _record(self, stack: str, layers: list[Any], built: BuiltStack, devices: list[str]) -> StackRecord:
        return StackRecord(
            layers=[layer.describe() for layer in layers] or ["dir (scratch root)"],
            mount_lines=built.mount_lines,
            devices=devices,
            top=str(Path(built.top).relative_to(self.scratch.root)),
            world=str(self.world_dirs[stack]) if stack in self.world_dirs else None,
        )

    @contextlib.contextmanager
    def _journaled_child(self, trial: Trial) -> Iterator[Callable[[int], None]]:
        """The timed child's process group goes into the journal, so that after a SIGKILL
        of layerbench `clean` can stop it (it would keep the stack's mounts busy)."""
        idents: list[int] = []

        def started(pid: int) -> None:
            idents.append(self.scratch.journal.add("group", f"run of trial {trial.index}", pgid=pid))

        try:
            yield started
        finally:
            for ident in idents:
                self.scratch.journal.done(ident)


def _trial_result(
    trial: Trial,
    started: str,
    outcome: RunResult,
    record: StackRecord,
    checked: list[str],
    still_dirty: int | None,
) -> TrialResult:
    """The trial's result, with the durability verdict of an ok run that claimed its data
    durable (checked: the devices, top first, its bytes had to reach)."""
    facts = dict(outcome.facts)
    counters = outcome.counters
    if counters.status == "ok" and (
        durable := durability.check(outcome.durable_bytes, checked, counters.devices, still_dirty)
    ):
        facts[durability.DURABILITY.key] = durable
    return TrialResult(trial, started, counters, outcome.units, outcome.unit, facts, record, outcome.metrics)


def _known_sum(*parts: int | None) -> int | None:
    """The sum of the readings there are; None if there is none."""
    known = [part for part in parts if part is not None]
    return sum(known) if known else None


def _guest_request(built: BuiltStack, workload: Workload[WorkloadOptions]) -> GuestRequest:
    """The rest of a trial whose stack has a vm layer: the layers above it and the workload."""
    return GuestRequest(
        layers=[layer.options.model_dump(warnings=False) for layer in built.rest],
        first_index=len(built.parts) + 1,
        workload_name=workload.name,
        workload=workload.options.model_dump(warnings=False),
        packed=workload.packed(),
        reference_fs_size=workload.reference_fs_size,
        timeout=workload.options.timeout,
        kernel_modules=sorted(
            {module for layer in built.rest for module in layer.kernel_modules}
            | set(workload.kernel_modules_for(workload.options))
        ),
        kind_modules=sorted({type(layer).__module__ for layer in built.rest} | {type(workload).__module__}),
    )
