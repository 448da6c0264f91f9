"""The formats of `layerbench history`: a table of every experiment, or JSON."""

import io
import json
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

COLUMNS = ("id", "name", "fleet", "host", "kernel", "started", "status", "runs", "stacks", "workloads")
TREND = "against previous"  # the same plan's previous finished experiment, as compare reads it


def _trend(record: dict[str, Any]) -> str:
    trend = record.get("against_previous")
    if not trend:
        return "-"
    agree = f"{trend['relative_agree']}/{trend['relative_compared']} relative costs agree"
    if trend.get("relative_reach"):
        agree += f" (reach x{trend['relative_reach']:.2f})"
    if trend["host_changed"]:
        return (
            f"vs {trend['previous']}: host changed ({trend['line'].split(': the host changed')[0]}); {agree}"
        )
    return f"vs {trend['previous']}: host steady; {agree}"


def _shown(record: dict[str, Any], column: str) -> Any:
    if column == "status" and record.get("status_reason"):
        return f"{record['status']} ({record['status_reason']})"  # interrupted (host lost)
    return record.get(column)


def _cells(record: dict[str, Any]) -> list[str]:
    return [
        ", ".join(v) if isinstance(v, list) else str(v if v is not None else "-")
        for v in (_shown(record, c) for c in COLUMNS)
    ] + [_trend(record)]


def render_text(records: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=160, color_system=None, highlight=False, markup=False)
    table = Table(title="experiments", title_justify="left")
    for column in (*COLUMNS, TREND):
        table.add_column(column, justify="right" if column in ("id", "runs") else "left")
    for record in records:
        table.add_row(*_cells(record))
    console.print(table)
    return buffer.getvalue()


def render_json(records: list[dict[str, Any]]) -> str:
    # 2: every experiment has `against_previous` (null for the first of its name).
    return json.dumps({"schema_version": 2, "experiments": records}, indent=2) + "\n"


FORMATS: dict[str, Callable[[list[dict[str, Any]]], str]] = {"text": render_text, "json": render_json}
