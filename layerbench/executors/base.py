"""Where a trial runs. An executor takes one trial of an experiment and hands back one
typed TrialResult (store/records.py); the experiment stores it and decides what runs next.

- LocalExecutor (local.py): here, in this host's scratch root (a vm layer hands the rest of
  the trial to its guest, whose agent runs it the same way);
- FakeExecutor (fake.py): scripted counters, no root, no mounts: tests of the schedule, the
  store, the statistics and every report format in well under a second.

- HostExecutor (fleet/executor.py): on one host of a Ray cluster, through that host's agent.

A new place to run trials is a new executor: implement the hooks below."""

import os
import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from layerbench.plan import Plan
from layerbench.plan.schedule import Trial
from layerbench.store.records import TrialResult
from layerbench.workloads.base import Workload, WorkloadOptions


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
        """The drift probe (observe/sentinel.py) on the machine the trials run on: each part's
        seconds and the probe's own cost; None where there is none."""
        return None

    def close(self) -> None:  # noqa: B027 - optional
        """After an experiment's last trial (also when it stops early): tear down what the
        executor kept between its trials (kept stacks)."""

    @abstractmethod
    def run(self, trial: Trial, setting: Setting) -> TrialResult:
        """Run one trial to its end (built, prepared, timed, torn down) and describe it."""
