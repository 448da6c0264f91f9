"""The formats of `layerbench compare`: text, markdown, json, html."""

import html as html_escape
import io
import json
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from layerbench import stats
from layerbench.compare import Comparison
from layerbench.reports import plots
from layerbench.reports.base import fmt_median_ci, fmt_ratio, host_lines
from layerbench.reports.html import bullet_list, figure, page, table
from layerbench.reports.json_export import finite

HEADER = [
    "stack",
    "workload",
    "A wall (median) [95% CI]",
    "B wall (median) [95% CI]",
    "B/A [CI, level]",
    "p adj.",
    "verdict",
    "n A/B",
]


def rows(comparison: Comparison) -> list[list[str]]:
    groups_a = stats.measured(comparison.a.runs)
    result = []
    for row in comparison.rows:
        values_a = [r[row.metric] for r in groups_a.get((row.stack, row.workload), [])]
        reference = stats.describe(row.stack, row.workload, row.metric, values_a)
        verdict = {"slower": "B slower", "faster": "B faster"}.get(row.decision, row.verdict)
        result.append(
            [
                row.stack,
                row.workload,
                fmt_median_ci(reference),
                fmt_median_ci(row),
                fmt_ratio(row),
                "-" if row.p_adjusted is None else f"{row.p_adjusted:.3f}",
                verdict,
                f"{reference.n}/{row.n}",
            ]
        )
    return result


def notes(comparison: Comparison) -> list[str]:
    found = []
    if comparison.plans_differ:
        found.append("the two experiments ran different plans: compare with care")
    found += [f"only in A: {s} × {w}" for s, w in comparison.only_in_a]
    found += [f"only in B: {s} × {w}" for s, w in comparison.only_in_b]
    return found


def host_rows(comparison: Comparison) -> list[list[str]]:
    return [[key, str(a), str(b)] for key, a, b in comparison.host_differences]


def title(comparison: Comparison) -> str:
    a, b = comparison.a, comparison.b
    return f"A = experiment {a.label} in {a.db}; B = experiment {b.label} in {b.db}"


def render_text(comparison: Comparison) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=160, color_system=None, highlight=False)
    console.print(title(comparison))
    result = Table(title="wall time, B against A", title_justify="left")
    for column in HEADER:
        result.add_column(column, justify="left" if column in ("stack", "workload", "verdict") else "right")
    for row in rows(comparison):
        result.add_row(*row)
    console.print(result)
    hosts = Table(title="host differences", title_justify="left")
    for column in ("key", "A", "B"):
        hosts.add_column(column)
    for row in host_rows(comparison):
        hosts.add_row(*row)
    console.print(hosts if comparison.host_differences else "host differences: none")
    for note in notes(comparison):
        console.print(f"note: {note}")
    return buffer.getvalue()


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def render_markdown(comparison: Comparison) -> str:
    lines = ["## layerbench comparison", "", title(comparison), "", "### Wall time, B against A", ""]
    lines += [_md_row(HEADER), _md_row(["---"] * len(HEADER)), *(_md_row(r) for r in rows(comparison))]
    lines += ["", "### Host differences", ""]
    if comparison.host_differences:
        lines += [
            _md_row(["key", "A", "B"]),
            _md_row(["---"] * 3),
            *(_md_row(r) for r in host_rows(comparison)),
        ]
    else:
        lines.append("none")
    if notes(comparison):
        lines += ["", "### Notes", "", *(f"- {n}" for n in notes(comparison))]
    return "\n".join(lines) + "\n"


def render_json(comparison: Comparison) -> str:
    return json.dumps(finite(comparison.as_dict()), indent=2, allow_nan=False) + "\n"


def render_html(comparison: Comparison) -> str:
    panels: dict[str, list[plots.RatioPoint]] = {}
    for row in comparison.rows:
        panels.setdefault(f"workload {row.workload}", []).append(
            plots.RatioPoint(
                row.stack,
                row.ratio,
                row.ratio_ci_low,
                row.ratio_ci_high,
                significant=row.significant,
            )
        )
    body = [
        "<h1>layerbench comparison</h1>",
        f"<p>{html_escape.escape(title(comparison))}</p>",
        "<h2>Wall time, B against A</h2>",
        "<p class='note'>Ratio of median wall times B / A with the 95 % bootstrap interval; red and "
        "starred: significant (Mann-Whitney, alpha 0.05).</p>",
    ]
    if panels:
        body.append(figure(plots.ratio_figure(panels, xlabel="wall time ratio B / A"), "ratio-plot"))
    body.append(table(HEADER, rows(comparison)))
    body.append("<h2>Host differences</h2>")
    body.append(
        table(["key", "A", "B"], host_rows(comparison)) if comparison.host_differences else "<p>none</p>"
    )
    body += [
        "<h2>Hosts</h2>",
        "<h3>A</h3>",
        bullet_list(host_lines(comparison.a.experiment["host"])),
        "<h3>B</h3>",
        bullet_list(host_lines(comparison.b.experiment["host"])),
    ]
    if notes(comparison):
        body += ["<h2>Notes</h2>", bullet_list(notes(comparison), "warnings")]
    return page("layerbench comparison", body)


FORMATS: dict[str, Callable[[Comparison], str]] = {
    "text": render_text,
    "markdown": render_markdown,
    "json": render_json,
    "html": render_html,
}
