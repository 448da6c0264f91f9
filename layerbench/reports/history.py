"""The formats of `layerbench history`: a table of every experiment, or JSON."""

import io
import json
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

COLUMNS = ("id", "name", "host", "kernel", "started", "status", "runs", "stacks", "workloads")


def _cells(record: dict[str, Any]) -> list[str]:
    return [
        ", ".join(v) if isinstance(v, list) else str(v if v is not None else "-")
        for v in (record[c] for c in COLUMNS)
    ]


def render_text(records: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=160, color_system=None, highlight=False)
    table = Table(title="experiments", title_justify="left")
    for column in COLUMNS:
        table.add_column(column, justify="right" if column in ("id", "runs") else "left")
    for record in records:
        table.add_row(*_cells(record))
    console.print(table)
    return buffer.getvalue()


def render_json(records: list[dict[str, Any]]) -> str:
    return json.dumps({"schema_version": 1, "experiments": records}, indent=2) + "\n"


FORMATS: dict[str, Callable[[list[dict[str, Any]]], str]] = {"text": render_text, "json": render_json}
