"""What the head asks of a host, and what comes back. Pickled: head and hosts run the same
layerbench and the same Ray (a fleet is a trusted network, see docs/fleet.md)."""

from dataclasses import dataclass
from typing import Any, Literal

from layerbench.core.facts import Fact, declare
from layerbench.plan import Plan, parse_plan
from layerbench.plan.schedule import Trial

FLEET_HOST = Fact("fleet_host", "before", "the fleet host whose agent ran the trial", str)
HOST_STARTED = Fact("host_started", "before", "when the host's agent took the trial (epoch seconds)", float)
HOST_FINISHED = Fact("host_finished", "after", "when the host's agent finished it (epoch seconds)", float)
declare(FLEET_HOST, HOST_STARTED, HOST_FINISHED)

Operation = Literal["check", "describe", "sentinel", "run"]


@dataclass(frozen=True)
class PlanSource:
    """The plan as the host rebuilds it: its text and the options it was loaded with."""

    text: str
    source: str
    quick: bool = False
    reps: int | None = None

    @classmethod
    def of(cls, plan: Plan) -> "PlanSource":
        options = plan.as_dict().get("run_options", {})
        return cls(plan.text, plan.source, bool(options.get("quick")), options.get("reps"))

    def load(self) -> Plan:
        return parse_plan(self.text, self.source, quick=self.quick, reps=self.reps)


@dataclass(frozen=True)
class Request:
    operation: Operation
    host: str  # the host it is meant for (the agent checks that it is that host)
    scratch: str  # the host's scratch root
    plan: PlanSource | None = None
    trial: Trial | None = None
    experiment_id: int = 0
    simulated: bool = False


@dataclass(frozen=True)
class Answer:
    """ok with a value, or a one-line error; ran_on is the host whose resource the Ray task
    held (recorded with each run: a trial is only ever measured where it was scheduled)."""

    ok: bool
    value: Any = None
    error: str = ""
    ran_on: str = ""
