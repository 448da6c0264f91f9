"""json: everything, for programs. The shape is documented in docs/reports.md."""

import json
import math
from collections.abc import Mapping
from typing import Any

from layerbench import stats
from layerbench.analysis import decompose, drift
from layerbench.core.runs import RunRecord
from layerbench.reports.base import ReportData
from layerbench.reports.document import Report, register
from layerbench.stats import sequential


def _facts(facts: Mapping[str, object]) -> dict[str, object]:
    """The experiment's facts but its stored rows: "summary" has them, as this report drew them."""
    return {key: value for key, value in facts.items() if key != sequential.ROWS.key}


# 2: every run carries `samples`, its time series (see docs/counters.md).
# 3: every summary row carries its decision, method, p_adjusted, correction, alpha,
#    equivalence, ci_level (the median's interval), ratio_ci_level and median_ratio.
# 4: `sentinels` (the drift probes) and `drift` (each part's trend over the experiment);
#    a run's facts carry its settle_* wait.
# 5: an elapsed-time summary row carries its `decomposition` (split, attribution); every run
#    carries `layers` (bytes per device of its stack, with the write amplification); the
#    runs have the kernel's metrics (psi_*, kthread_cpu_s, vm_*, disk_*) and facts.kernel.
# 6: `marginal` (what each layer of an incremental stack adds: a row per step, workload and
#    metric, stack / the stack one layer shorter) and `sweeps` (each sweep's stacks and
#    values); the plan carries `sweeps` and `increments`.
SCHEMA_VERSION = 6


# The history's own shape: 2: every experiment has `against_previous` (null for the first
# of its name).
HISTORY_SCHEMA_VERSION = 2


@register("json")
def render(report: Report) -> str:
    """Everything, for programs: an experiment (its shape in docs/reports.md), a comparison,
    a bisect, or the history."""
    if report.kind in ("comparison", "bisect"):
        return json.dumps(finite(report.data.as_dict()), indent=2, allow_nan=False) + "\n"
    if report.kind == "history":
        return (
            json.dumps(
                {
                    "schema_version": HISTORY_SCHEMA_VERSION,
                    "experiments": [record.as_dict() for record in report.data],
                },
                indent=2,
            )
            + "\n"
        )
    return experiment_json(report.data)


def experiment_json(data: ReportData) -> str:
    experiment = data.experiment
    groups = data.measured
    document = {
        "schema_version": SCHEMA_VERSION,
        "experiment": experiment.header(
            "id",
            "name",
            "status",
            "seed",
            "baseline",
            "started",
            "finished",
            "plan_source",
            "plan_text",
            "version",
        )
        | {"plan": experiment.plan.model_dump(exclude_unset=True), "facts": _facts(experiment.facts)},
        "host": experiment.host.facts(),
        "stacks": {name: stack.as_dict() for name, stack in experiment.stacks.items()},
        "summary": [row.as_dict() | _decomposition(data, row, groups) for row in data.summaries],
        "runs": [
            run.row()
            | {
                "devices": run.devices,
                "facts": run.facts,
                "samples": [s.as_dict() for s in data.samples.get(run.id or 0, [])],
                "layers": decompose.layers_of_run(run),
            }
            for run in data.runs
        ],
        "marginal": [step.as_dict() for step in data.marginals],
        "sweeps": [
            {
                "group": group,
                "paths": experiment.plan.sweeps[stacks[0]].paths,
                "points": [{"stack": stack, "values": data.sweep_values(stack)} for stack in stacks],
            }
            for group, stacks in data.sweeps.items()
        ],
        "sentinels": [
            {
                "seq": s.seq,
                "taken": s.taken,
                "after_trial": s.after_trial,
                "cost_s": s.cost_s,
                "parts": s.parts,
            }
            for s in data.sentinels
        ],
        "drift": [m.as_dict() for m in drift.within(data.sentinels)],
        "warnings": data.warnings,
    }
    return json.dumps(finite(document), indent=2, allow_nan=False) + "\n"


def _decomposition(
    data: ReportData, row: stats.Summary, groups: dict[tuple[str, str], list[RunRecord]]
) -> dict[str, object]:
    extra = decompose.summary_extra(data.summaries, data.baseline, row, groups)
    return {"decomposition": extra} if extra is not None else {}


def finite(value: Any) -> Any:
    """JSON has no infinity: an unbounded interval end (a baseline of zeros) is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value
