"""Where a trial runs. An executor takes one trial of an experiment and hands back one
typed TrialResult; the experiment stores it and decides what runs next.

- LocalExecutor (local.py): here, in this host's scratch root (a vm layer hands the rest of
  the trial to its guest, whose agent runs it the same way);
- FakeExecutor (fake.py): scripted counters, no root, no mounts: tests of the schedule, the
  store, the statistics and every report format in well under a second.

- HostExecutor (fleet.py): on one host of a Ray cluster, through that host's agent.

A new place to run trials is a new executor: implement the hooks below."""

import os
import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from layerbench.measure import RunCounters
from layerbench.plan import Plan
from layerbench.schedule import Trial
from layerbench.workloads.base import Workload, WorkloadOptions


@dataclass(frozen=True)
class StackRecord:
    """What a stack was when built: for the reports' Config block."""

    layers: list[str]
    mount_lines: list[str]
    devices: list[str]
    top: str
    world: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "layers": self.layers,
            "mount_lines": self.mount_lines,
            "devices": self.devices,
            "top": self.top,
            "world": self.world,
        }


@dataclass
class TrialResult:
    """One trial's run: what the store keeps of it, in one piece."""

    trial: Trial
    started: str
    counters: RunCounters
    units: float | None = None  # the work the run did, for its throughput
    unit: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # the workload's and the noise's
    stack: StackRecord | None = None
    reported: dict[str, float] = field(default_factory=dict)  # metrics.reported(): the workload's own

    @property
    def throughput(self) -> float | None:
        ok = self.counters.status == "ok" and self.units and self.counters.wall_s > 0
        return self.units / self.counters.wall_s if ok and self.units else None

    @property
    def disturbed(self) -> bool:
        """Other work used the CPU while the run was timed (the noise facts of the run)."""
        return bool(self.counters.facts.get("disturbed") or self.facts.get("disturbed"))

    def row(self) -> dict[str, Any]:
        """The runs-table row: the trial, the counters, the work."""
        counters = self.counters
        row: dict[str, Any] = {
            name: getattr(counters, name)
            for name in counters.__dataclass_fields__
            if name not in ("devices", "samples", "sampler", "facts")
        }
        row.update(
            trial=self.trial.index,
            stack=self.trial.stack,
            workload=self.trial.workload,
            rep=self.trial.rep,
            warmup=int(self.trial.warmup),
            started=self.started,
        )
        if self.throughput is not None:
            row.update(units=self.units, unit=self.unit, throughput=self.throughput)
        if self.counters.status == "ok":
            row.update(self.reported)
        return row

    def all_facts(self) -> dict[str, Any]:
        """The facts stored with the run: the workload's, the noise's, the sampler's cost."""
        facts = {**self.facts, **self.counters.facts}
        if self.counters.sampler:
            facts["sampler"] = self.counters.sampler
        if self.trial.rerun:
            facts["rerun"] = self.trial.rerun
        return facts


@dataclass
class Setting:
    """What every trial of one experiment shares."""

    plan: Plan
    workloads: dict[str, Workload[WorkloadOptions]]
    experiment_id: int


class HostLost(Exception):
    """The machine the trials run on is gone (dead or cut off). Its experiment stops,
    interrupted with this reason; its trials are never run on another machine."""

    reason = "host lost"


class Executor(ABC):
    """Runs the trials of experiments. Every hook but run() has a default."""

    def check(self, plan: Plan, workloads: dict[str, Workload[WorkloadOptions]]) -> None:  # noqa: B027 - optional
        """Before anything is stored: raise UserError (one line) if a trial cannot run here;
        fetch or pack what the trials need, untimed."""

    def host(self) -> dict[str, Any]:
        """What the machine the trials run on is (stored with the experiment)."""
        return {"hostname": socket.gethostname(), "cpus": os.cpu_count()}

    def sentinel(self) -> tuple[dict[str, float], float] | None:
        """The drift probe (sentinel.py) on the machine the trials run on: each part's
        seconds and the probe's own cost; None where there is none."""
        return None

    @abstractmethod
    def run(self, trial: Trial, setting: Setting) -> TrialResult:
        """Run one trial to its end (built, prepared, timed, torn down) and describe it."""
