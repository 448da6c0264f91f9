"""markdown: the document as GitHub-flavoured Markdown, for an issue or a wiki."""

from layerbench.reports.document import Figure, Lines, Report, Table, register


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _table(table: Table) -> list[str]:
    lines = [f"**{table.title}**", ""] if table.title else []
    lines += [_row(table.header), _row(["---"] * len(table.header)), *(_row(r) for r in table.texts())]
    if table.notes:
        lines += ["", *(f"- {note}" for note in table.notes)]
    return lines


def _lines(block: Lines) -> list[str]:
    lines = [f"**{block.title}**", ""] if block.title else []
    if block.preformatted:
        return [*lines, "```", *block.lines, "```"]
    return lines + [f"- {line}" for line in block.lines]


@register("markdown")
def render(report: Report) -> str:
    document = report.document
    lines = [f"## {document.title}", "", *document.lead]
    for section in document.sections:
        lines += ["", f"{'#' * (section.level + 1)} {section.title}"]
        figures = [block.title for block in section.blocks if isinstance(block, Figure)]
        for block in section.blocks:
            if isinstance(block, Table):
                lines += ["", *_table(block)]
            elif isinstance(block, Lines):
                lines += ["", *_lines(block)]
        if figures:
            lines += ["", f"_Figures in the html report: {'; '.join(figures)}._"]
    return "\n".join(lines) + "\n"
