"""The report of `layerbench history`: a table of every experiment, one Document."""

from typing import Any

from layerbench.reports.document import Cell, Document, Section, Table
from layerbench.store import ExperimentSummary

COLUMNS = ("id", "name", "fleet", "host", "kernel", "started", "status", "runs", "stacks", "workloads")
TREND = "against previous"  # the same plan's previous finished experiment, as compare reads it


def _trend(record: ExperimentSummary) -> str:
    trend = record.against_previous
    if not trend:
        return "-"
    agree = f"{trend.relative_agree}/{trend.relative_compared} relative costs agree"
    if trend.relative_reach:
        agree += f" (reach x{trend.relative_reach:.2f})"
    if trend.host_changed:
        moved = (trend.line or "").split(": the host changed")[0]
        return f"vs {trend.previous}: host changed ({moved}); {agree}"
    return f"vs {trend.previous}: host steady; {agree}"


def _shown(record: ExperimentSummary, column: str) -> Any:
    if column == "status" and record.status_reason:
        return f"{record.status} ({record.status_reason})"  # interrupted (host lost)
    return getattr(record, column)


def _cells(record: ExperimentSummary) -> list[str]:
    return [
        ", ".join(v) if isinstance(v, list) else str(v if v is not None else "-")
        for v in (_shown(record, c) for c in COLUMNS)
    ] + [_trend(record)]


def document(records: list[ExperimentSummary]) -> Document:
    """Every experiment of a store, oldest first, each against its plan's previous one."""
    rows = [[Cell(text) for text in _cells(record)] for record in records]
    header = [*COLUMNS, TREND]
    table = Table(header, rows, left=tuple(i for i, c in enumerate(header) if c not in ("id", "runs")))
    sections = [Section("Experiments", [table])]
    return Document("layerbench history", [f"{len(records)} experiment(s)"], sections, wide=True)
