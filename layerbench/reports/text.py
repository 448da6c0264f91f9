"""text: the document for the terminal (the default), a table row to a line on a
100-column terminal; lines are not broken (the terminal wraps them, a copied line stays
whole); the figures are named, drawn in the html report."""

import io

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable
from rich.text import Text

from layerbench.reports.document import Document, Figure, Lines, Report, Table, register

WIDTH = 100
WIDE = 160
_STYLE = {"slower": "red", "faster": "green", "baseline": "dim", "equivalent": "cyan"}


def _table(table: Table) -> RichTable:
    shown = RichTable(title=escape(table.title) if table.title else None, title_justify="left")
    for index, column in enumerate(table.header):
        shown.add_column(escape(column), justify="left" if index in table.left else "right")
    for row in table.rows:
        shown.add_row(*(escape(cell.text) for cell in row), style=_STYLE.get(table.row_style(row), ""))
    return shown


def build(document: Document) -> list[object]:
    """The renderables, so the CLI can print them in colour."""
    parts: list[object] = [f"[bold]{escape(document.title)}[/bold]", *map(escape, document.lead)]
    for section in document.sections:
        parts.append(f"\n[bold underline]{escape(section.title)}[/bold underline]")
        figures = []
        for block in section.blocks:
            if isinstance(block, Table):
                parts.append(_table(block))
                parts += [f"  [dim]note:[/dim] {escape(note)}" for note in block.notes]
            elif isinstance(block, Lines):
                if block.title:
                    parts.append(f"[bold]{escape(block.title)}[/bold]")
                parts += [Text(line) if block.preformatted else escape(line) for line in block.lines]
            elif isinstance(block, Figure):
                figures.append(block.title)
        if figures:
            parts.append(escape(f"(figures in the html report: {'; '.join(figures)})"))
    return parts


def show(console: Console, document: Document) -> None:
    """Print the document: tables fitted to the console, lines whole."""
    for part in build(document):
        console.print(part, soft_wrap=not isinstance(part, RichTable))


@register("text")
def render(report: Report) -> str:
    buffer = io.StringIO()
    width = WIDE if report.document.wide else WIDTH
    show(Console(file=buffer, width=width, color_system=None, highlight=False), report.document)
    return buffer.getvalue()
