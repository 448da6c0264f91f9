"""On the head: one experiment per host of a fleet, each in a thread of its own, every run
stored as it ends.

Nothing is stored before every host has passed its checks (bad input: one line, nothing
started). A host lost mid-way ends its own experiment, `interrupted (host lost)`, with its
finished runs kept; the other hosts go on. `run --resume` on a lost host, once it is back,
runs only its missing trials, on that host."""

import contextlib
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from layerbench.core.errors import UserError
from layerbench.executors.base import HostLost
from layerbench.experiment import Experiment, Trial
from layerbench.fleet import FLEET_ID_LENGTH, hosts
from layerbench.fleet.executor import HostExecutor
from layerbench.plan import Plan
from layerbench.store import Store
from layerbench.store.records import TrialResult

# host name, trial, trials to do, the result (None: the trial starts)
FleetProgress = Callable[[str, Trial, int, TrialResult | None], None]


@dataclass
class HostOutcome:
    host: str
    experiment_id: int
    status: str = "running"
    detail: str = ""


@dataclass
class FleetOutcome:
    fleet: str
    hosts: list[HostOutcome] = field(default_factory=list)


def _check_all(executors: dict[str, HostExecutor], plan: Plan, experiments: dict[str, Experiment]) -> None:
    """Every host's checks at once; the first refusal, one line, before anything is stored."""
    with ThreadPoolExecutor(max_workers=min(32, len(executors))) as pool:
        futures = {
            name: pool.submit(executor.check, plan, experiments[name].workloads)
            for name, executor in executors.items()
        }
        for future in futures.values():
            try:
                future.result()
            except HostLost as lost:
                raise UserError(f"{lost} (during its checks; nothing was started)") from None


def run_fleet(
    plan: Plan,
    store: Store,
    chosen: list[hosts.Host],
    *,
    progress: FleetProgress | None = None,
    seed: int | None = None,
) -> FleetOutcome:
    fleet = uuid.uuid4().hex[:FLEET_ID_LENGTH]
    executors = {h.name: HostExecutor(h) for h in chosen}
    with contextlib.ExitStack() as agents:  # every host freed, whatever ends the fleet
        for executor in executors.values():
            agents.callback(executor.close)
        return _run_on(fleet, plan, store, chosen, executors, progress, seed)


def _run_on(
    fleet: str,
    plan: Plan,
    store: Store,
    chosen: list[hosts.Host],
    executors: dict[str, HostExecutor],
    progress: FleetProgress | None,
    seed: int | None,
) -> FleetOutcome:
    experiments: dict[str, Experiment] = {}
    for name, executor in executors.items():
        # The first picks the seed as any experiment does; every other host takes the same.
        experiments[name] = Experiment(plan, store, executor, seed=seed, fleet=fleet, host_name=name)
        seed = experiments[name].seed
    _check_all(executors, plan, experiments)
    store.create_fleet(
        fleet,
        name=plan.name,
        plan_source=plan.source,
        reference=chosen[0].name,
        hosts=[h.name for h in chosen],
    )
    outcome = FleetOutcome(fleet)
    for name, experiment in experiments.items():
        experiment.prepare([])
        assert experiment.id is not None
        outcome.hosts.append(HostOutcome(name, experiment.id))
    run_hosts(experiments, outcome.hosts, progress)
    return outcome


def run_hosts(
    experiments: dict[str, Experiment], outcomes: list[HostOutcome], progress: FleetProgress | None
) -> None:
    """Each host's experiment to its end, all at once; a lost host stops only its own."""

    def one(outcome: HostOutcome) -> None:
        experiment = experiments[outcome.host]

        def report(trial: Trial, total: int, result: TrialResult | None) -> None:
            if progress:
                progress(outcome.host, trial, total, result)

        try:
            experiment.run(report)
            outcome.status = "done"
        except HostLost as lost:
            outcome.status, outcome.detail = "interrupted (host lost)", str(lost)
        except Exception as exc:  # one host's bug must not stop the others; its experiment says failed
            outcome.status, outcome.detail = "failed", f"{type(exc).__name__}: {exc}"
        finally:  # the host is free as soon as its own experiment ends
            if isinstance(experiment.executor, HostExecutor):
                experiment.executor.close()

    threads = [threading.Thread(target=one, args=(o,), name=f"host {o.host}", daemon=True) for o in outcomes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def resume_host(store: Store, experiment_id: int, progress: FleetProgress | None = None) -> HostOutcome:
    """A lost host's experiment, once the host is back: only its missing trials, there."""
    record = store.experiment(experiment_id)
    if not record.host_name:
        raise UserError(f"experiment {experiment_id} ran on no fleet host; resume it without --fleet")
    (outcome,) = _resume({record.host_name: experiment_id}, store, progress)
    return outcome


def resume_fleet(store: Store, fleet: str, progress: FleetProgress | None = None) -> list[HostOutcome]:
    """Every experiment of the fleet that did not finish (its host was lost, or its head
    died), each on its own host again, all at once: only the trials it has no run for."""
    unfinished = {
        name: member.id for name, member in store.fleet(fleet).experiments.items() if member.status != "done"
    }
    if not unfinished:
        raise UserError(f"fleet {fleet}: every host's experiment is complete; nothing to resume")
    return _resume(unfinished, store, progress)


def _resume(
    experiment_ids: dict[str, int], store: Store, progress: FleetProgress | None
) -> list[HostOutcome]:
    chosen = hosts.select(",".join(experiment_ids))  # each host must have joined (again)
    executors = {h.name: HostExecutor(h) for h in chosen}
    with contextlib.ExitStack() as agents:
        for executor in executors.values():
            agents.callback(executor.close)
        experiments = {
            name: Experiment.resume(store, executors[name], ident) for name, ident in experiment_ids.items()
        }
        first = next(iter(experiments.values()))
        _check_all(executors, first.plan, experiments)  # every host, before any experiment is reopened
        outcomes = []
        for name, experiment in experiments.items():
            experiment.prepare([])
            outcomes.append(HostOutcome(name, experiment_ids[name]))
        run_hosts(experiments, outcomes, progress)
    return outcomes
