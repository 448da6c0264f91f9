"""HostExecutor: the trials of one host of a fleet, sent to it through Ray.

The experiment runs on the head and decides what runs next, as it does here; each trial goes
to the host's agent (fleet/remote.py: an actor started on the host at the experiment's first
request, closed at its end) and comes back as the TrialResult the agent measured there. A
host that dies or is cut off raises HostLost: its experiment stops, and its trial is never
given to another host."""

import contextlib
from typing import Any

import ray
from ray.exceptions import RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from layerbench.core.errors import UserError
from layerbench.executors.base import Executor, HostLost, Setting
from layerbench.fleet import hosts
from layerbench.fleet.hosts import Host
from layerbench.fleet.remote import CLOSE_WAIT_S, RESOURCE_PREFIX, HostAgent, on_host
from layerbench.fleet.requests import FLEET_HOST, Answer, Operation, PlanSource, Request
from layerbench.plan import Plan
from layerbench.plan.schedule import Trial
from layerbench.store.records import TrialResult
from layerbench.workloads.base import Workload, WorkloadOptions


class HostExecutor(Executor):
    def __init__(self, host: Host) -> None:
        self.host_ = host
        self._checked = False
        self._agent: ray.actor.ActorHandle | None = None

    def _placement(self) -> dict[str, Any]:
        return {
            "resources": {RESOURCE_PREFIX + self.host_.name: 1},
            "scheduling_strategy": NodeAffinitySchedulingStrategy(self.host_.node_id, soft=False),
        }

    def _send(self, request: Request) -> ray.ObjectRef:
        if self.host_.simulated:
            # Simulated hosts share a few CPUs of the test machine's nodes, which bounds how
            # many Ray workers they start.
            return on_host.options(num_cpus=1, **self._placement()).remote(request)
        if self._agent is None:
            # ray.remote made the class an ActorClass, which mypy cannot see through a decorator
            self._agent = HostAgent.options(num_cpus=0, **self._placement()).remote(  # type: ignore[attr-defined]
                self.host_.name, self.host_.scratch
            )
        return self._agent.ask.remote(request)

    def close(self) -> None:
        """The host's agent tears down, releases the scratch root and frees the host."""
        agent, self._agent = self._agent, None
        if agent is None:
            return
        with contextlib.suppress(RayError):
            ray.get(agent.close.remote(), timeout=CLOSE_WAIT_S + 10)
        self._kill(agent)

    @staticmethod
    def _kill(agent: "ray.actor.ActorHandle") -> None:
        with contextlib.suppress(RayError, ValueError):
            ray.kill(agent, no_restart=True)

    def _ask(self, operation: Operation, plan: Plan | None = None, **fields: Any) -> Answer:
        request = Request(
            operation,
            self.host_.name,
            self.host_.scratch,
            plan=PlanSource.of(plan) if plan is not None else None,
            simulated=self.host_.simulated,
            **fields,
        )
        try:
            answer = self._wait(self._send(request))
        except RayTaskError as exc:  # a bug on the host: its first line, for the report
            self._lost()
            raise HostLost(f"host {self.host_.name}: {str(exc).splitlines()[0]}") from exc
        except RayError as exc:  # its node or actor died, or it cannot be scheduled any more
            self._lost()
            raise HostLost(f"host {self.host_.name} lost: {type(exc).__name__}") from exc
        if answer.ran_on and answer.ran_on != self.host_.name:
            raise HostLost(f"host {self.host_.name}: the trial ran on {answer.ran_on}")
        return answer

    def _wait(self, ref: ray.ObjectRef) -> Answer:
        """The answer, or HostLost once the cluster holds the host's node dead. Ray fails a
        task whose worker died at once, but a host cut off (its node frozen, its link down)
        keeps its task pending: the node's death, seen by the head's health checks, ends it."""
        while True:
            ready, _ = ray.wait([ref], timeout=hosts.LIVENESS_S)
            if ready:
                return ray.get(ref)
            if not hosts.alive(self.host_.node_id):
                with contextlib.suppress(RayError, ValueError):
                    ray.cancel(ref, force=True)
                self._lost()
                raise HostLost(f"host {self.host_.name} lost: its node stopped answering")

    def _lost(self) -> None:
        """A lost host's agent is not asked to close (it may never answer): it is killed, and
        the agent, its parent gone, tears down on the host if the host is still there."""
        agent, self._agent = self._agent, None
        if agent is not None:
            self._kill(agent)

    def check(self, plan: Plan, workloads: dict[str, Workload[WorkloadOptions]]) -> None:
        if self._checked:
            return
        answer = self._ask("check", plan)
        if not answer.ok:
            raise UserError(f"host {self.host_.name}: {answer.error}")
        self._checked = True

    def host(self) -> dict[str, Any]:
        answer = self._ask("describe")
        return (answer.value if answer.ok else {}) | {FLEET_HOST.key: self.host_.name}

    def sentinel(self) -> tuple[dict[str, float], float] | None:
        answer = self._ask("sentinel")
        return answer.value if answer.ok else None

    def run(self, trial: Trial, setting: Setting) -> TrialResult:
        answer = self._ask("run", setting.plan, trial=trial, experiment_id=setting.experiment_id)
        if not answer.ok:
            raise HostLost(f"host {self.host_.name}: {answer.error}")
        result: TrialResult = answer.value
        result.facts[FLEET_HOST.key] = answer.ran_on
        return result
