"""mail: plain text for a mailing list, shaped like the FreeBSD nullfs report (Hardware/OS,
Config per stack, Test, the Numbers in csh `time` format, then the ratios): each section a
titled block, each table in aligned columns."""

from layerbench.reports.document import Figure, Lines, Report, Table, register


def _title(text: str, rule: str = "-") -> list[str]:
    return [f"{text}:", rule * (len(text) + 1)]


def _table(table: Table) -> list[str]:
    texts = [table.header, *table.texts()]
    widths = [max(len(row[i]) for row in texts) for i in range(len(table.header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.ljust(widths[i]) if i in table.left else cell.rjust(widths[i])
            for i, cell in enumerate(cells)
        ).rstrip()

    lines = [f"{table.title}:"] if table.title else []
    lines += [line(table.header), *(line(row) for row in table.texts())]
    return lines + [f"  ({note})" for note in table.notes]


@register("mail")
def render(report: Report) -> str:
    document = report.document
    lines = [document.title, *document.lead, ""]
    for section in document.sections:
        lines += _title(section.title)
        figures = []
        for block in section.blocks:
            if isinstance(block, Table):
                lines += [*_table(block), ""]
            elif isinstance(block, Lines):
                lines += ([f"{block.title}:"] if block.title else []) + [*block.lines, ""]
            elif isinstance(block, Figure):
                figures.append(block.title)
        if figures:
            lines += [f"(figures in the html report: {'; '.join(figures)})", ""]
    return "\n".join(lines).rstrip("\n") + "\n"
