"""text: rich tables per workload, for the terminal (the default)."""

import io

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from layerbench.reports.base import (
    ReportData,
    details_table,
    host_lines,
    marginal_table,
    register,
    stack_table,
)

_VERDICT_STYLE = {"slower": "red", "faster": "green", "baseline": "dim", "equivalent": "cyan"}


def _fleet_table(data: ReportData) -> list[object]:
    """A fleet's experiment: each stack's elapsed-time ratio on every host, side by side."""
    if not data.fleet_ratios:
        return []
    header, rows = data.fleet_table()
    fleet = Table(
        title=escape(f"fleet {data.experiment['fleet']}: elapsed time per host"), title_justify="left"
    )
    for column in header:
        fleet.add_column(column)
    for row in rows:
        fleet.add_row(*map(escape, row))
    return [fleet]


def build(data: ReportData) -> list[object]:
    """The renderables, so the CLI can print them in colour."""
    experiment = data.experiment
    parts: list[object] = [
        f"[bold]Experiment {experiment['id']}[/bold] "
        + escape(
            f"{experiment['name']} ({experiment['status']}; started {experiment['started']}; "
            f"seed {experiment['seed']}; baseline {data.baseline})"
        ),
        *map(escape, host_lines(experiment["host"])),
        *map(escape, data.host_state_lines()),
    ]
    parts += _fleet_table(data)
    for workload in data.workloads:
        header, rows = stack_table(data, workload)
        table = Table(title=escape(f"workload {workload}"), title_justify="left")
        for column in header:
            table.add_column(column, justify="left" if column in ("stack", "verdict") else "right")
        for row in rows:
            style = _VERDICT_STYLE.get(row[3].split()[0] if row[3] else "", "")
            table.add_row(*map(escape, row), style=style)
        parts.append(table)
        parts += [f"[bold]why[/bold] {escape(line)}" for line in data.why_lines(workload)]
        parts += [f"[bold]split[/bold] {escape(line)}" for line in data.split_lines(workload)]
        parts += [f"[bold]sweep[/bold] {escape(line)}" for line in data.sweep_lines(workload)]
        if steps := marginal_table(data, workload):
            added = Table(title=escape(f"workload {workload}: what each layer adds"), title_justify="left")
            for column in steps[0]:
                added.add_column(
                    column, justify="left" if column in ("stack", "adds", "on top of") else "right"
                )
            for row in steps[1]:
                added.add_row(*map(escape, row))
            parts.append(added)
        details = details_table(data, workload)
        if details:
            extra = Table(title=escape(f"workload {workload}: details"), title_justify="left")
            for column in details[0]:
                extra.add_column(column, justify="left" if column == "stack" else "right")
            for row in details[1]:
                extra.add_row(*map(escape, row))
            parts.append(extra)
    failed = data.failed_runs()
    if failed:
        table = Table(title="failed runs", title_justify="left")
        for column in ("stack", "workload", "rep", "error"):
            table.add_column(column)
        for run in failed:
            rep = f"{run['rep'] + 1}{' (warm-up)' if run['warmup'] else ''}"
            table.add_row(*map(escape, (run["stack"], run["workload"], rep, run["error"] or "")))
        parts.append(table)
    if note := data.design_note():
        parts.append(escape(note))
    parts += [f"[yellow]warning:[/yellow] {escape(w)}" for w in data.warnings]
    return parts


@register("text")
def render(data: ReportData) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=160, color_system=None, highlight=False)
    for part in build(data):
        console.print(part)
    return buffer.getvalue()
