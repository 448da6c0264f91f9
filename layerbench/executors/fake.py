"""FakeExecutor: scripted counters instead of real runs. No root, no mounts, no processes;
the schedule, the store, the statistics and every report format run as for real."""

from collections.abc import Callable
from dataclasses import fields
from typing import Any

from layerbench.core import metrics
from layerbench.executors.base import Executor, Setting
from layerbench.observe.measure import RunCounters
from layerbench.plan.schedule import Trial
from layerbench.stacks.base import make_layers
from layerbench.store import now
from layerbench.store.records import StackRecord, TrialResult

Script = Callable[[Trial], dict[str, Any]]
SentinelScript = Callable[[int], dict[str, float]]  # the probe's number -> each part's seconds


class FakeExecutor(Executor):
    """script(trial) gives the run's metric values (wall_s at least); any other counter of
    the registry defaults to 0. A value "status": "failed" with an "error" makes a failed
    run; "units" and "unit" give the work done."""

    def __init__(
        self, script: Script, sentinel: SentinelScript | None = None, probe_cost_s: float = 0.0
    ) -> None:
        self.script = script
        self.sentinel_script = sentinel
        self.probe_cost_s = probe_cost_s  # what each probe says it cost (the budget reads it)
        self.trials: list[Trial] = []  # what ran, in order
        self.probes = 0

    def sentinel(self) -> tuple[dict[str, float], float] | None:
        if self.sentinel_script is None:
            return None
        self.probes += 1
        return self.sentinel_script(self.probes - 1), self.probe_cost_s

    def host(self) -> dict[str, Any]:
        return {"hostname": "fake", "cpus": 1, "kernel": "scripted", "disks": [], "scratch_fs": {}}

    def run(self, trial: Trial, setting: Setting) -> TrialResult:
        self.trials.append(trial)
        values = dict(self.script(trial))
        known = {f.name for f in fields(RunCounters)}
        defaults = {m.name: 0 for m in metrics.METRICS if m.name in known}
        reported = {k: values.pop(k) for k in list(values) if k in metrics.reported()}
        counters = RunCounters(
            status=values.pop("status", "ok"),
            error=values.pop("error", None),
            exit_code=values.pop("exit_code", 0),
            **(defaults | {k: v for k, v in values.items() if k in known}),
        )
        layers = make_layers(setting.plan.stacks[trial.stack])
        return TrialResult(
            trial=trial,
            started=now(),
            counters=counters,
            units=values.get("units"),
            unit=values.get("unit"),
            facts={k: v for k, v in values.items() if k not in known and k not in ("units", "unit")},
            stack=StackRecord(
                [layer.describe() for layer in layers] or ["dir (scratch root)"], [], [], "fake"
            ),
            reported=reported,
        )
