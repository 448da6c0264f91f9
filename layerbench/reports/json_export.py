"""json: everything, for programs. The shape is documented in the README (schema 1)."""

import json

from layerbench.reports.base import ReportData, register
from layerbench.store import RUN_COLUMNS

SCHEMA_VERSION = 1


@register("json")
def render(data: ReportData) -> str:
    experiment = data.experiment
    document = {
        "schema_version": SCHEMA_VERSION,
        "experiment": {
            key: experiment[key]
            for key in (
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
        }
        | {"plan": experiment["plan"]},
        "host": experiment["host"],
        "stacks": experiment["stacks"],
        "summary": [row.as_dict() for row in data.summaries],
        "runs": [
            {key: run[key] for key in RUN_COLUMNS} | {"devices": run["devices"], "facts": run["facts"]}
            for run in data.runs
        ],
        "warnings": data.warnings,
    }
    return json.dumps(document, indent=2) + "\n"
