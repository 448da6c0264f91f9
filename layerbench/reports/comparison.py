"""The formats of `layerbench compare`: text, markdown, json, html. Each shows, in this
order: the drift line (when the host moved), the relative costs, the absolute times, the
sentinel's parts side by side, and the host differences."""

import html as html_escape
import io
import json
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from layerbench import stats
from layerbench.analysis.compare import Comparison
from layerbench.reports import host_state, plots
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


RELATIVE_HEADER = [
    "stack",
    "workload",
    "A: stack / baseline",
    "B: stack / baseline",
    "B/A of those [CI, level]",
    "p adj.",
    "verdict",
    "rounds A/B",
]


def relative_rows(comparison: Comparison) -> list[list[str]]:
    result = []
    for row in comparison.relative:
        values_a = comparison.a.round_ratios(row.stack, row.workload)
        reference = stats.describe(row.stack, row.workload, row.metric, values_a)
        verdict = {"slower": "B relatively slower", "faster": "B relatively faster"}.get(
            row.decision, row.verdict
        )
        result.append(
            [
                row.stack,
                row.workload,
                _x(reference.median),
                _x(row.median),
                fmt_ratio(row),
                "-" if row.p_adjusted is None else f"{row.p_adjusted:.3f}",
                verdict,
                f"{reference.n}/{row.n}",
            ]
        )
    return result


def _x(value: float | None) -> str:
    return "-" if value is None else f"x{value:.2f}"


SENTINEL_HEADER = ["sentinel part", "A median", "B median", "B/A [CI]", "p adj.", "moved"]


def sentinel_rows(comparison: Comparison) -> list[list[str]]:
    def median_ms(side_samples: list, part: str) -> str:
        values = [s.parts[part] for s in side_samples if part in s.parts]
        return f"{1000 * sorted(values)[len(values) // 2]:.1f} ms" if values else "-"

    return [
        [
            move.label,
            median_ms(comparison.a.sentinels, move.part),
            median_ms(comparison.b.sentinels, move.part),
            f"x{move.ratio:.2f} [{move.low:.2f}-{move.high:.2f}]"
            if move.low is not None
            else f"x{move.ratio:.2f}",
            f"{move.p_adjusted:.3f}",
            "yes" if move.moved else "no",
        ]
        for move in comparison.drift.sentinel_moves
    ]


def drift_lines(comparison: Comparison) -> list[str]:
    """First thing a reader sees: whether the host moved between A and B."""
    if line := comparison.drift.line():
        return [f"host changed: {line}"]
    said = comparison.agreement()
    if not comparison.drift.sentinel_compared:
        sentinel = "no sentinel to compare (an experiment ran without one or with too few probes)"
    else:
        sentinel = "the sentinel did not move"
    return [f"host steady: the baseline did not move materially; {sentinel}" + (f"; {said}" if said else "")]


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
    console = Console(file=buffer, width=160, color_system=None, highlight=False, markup=False)
    console.print(title(comparison))
    for line in drift_lines(comparison):
        console.print(line)
    if comparison.relative:
        relative = Table(
            title="relative cost (each stack against its own baseline), B against A", title_justify="left"
        )
        for column in RELATIVE_HEADER:
            relative.add_column(
                column, justify="left" if column in ("stack", "workload", "verdict") else "right"
            )
        for row in relative_rows(comparison):
            relative.add_row(*row)
        console.print(relative)
    result = Table(title="absolute wall time, B against A", title_justify="left")
    for column in HEADER:
        result.add_column(column, justify="left" if column in ("stack", "workload", "verdict") else "right")
    for row in rows(comparison):
        result.add_row(*row)
    console.print(result)
    if comparison.drift.sentinel_moves:
        probes = Table(title="drift sentinel, B against A", title_justify="left")
        for column in SENTINEL_HEADER:
            probes.add_column(column, justify="left" if column == "sentinel part" else "right")
        for row in sentinel_rows(comparison):
            probes.add_row(*row)
        console.print(probes)
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
    lines = [
        "## layerbench comparison",
        "",
        title(comparison),
        "",
        *(f"**{line}**" for line in drift_lines(comparison)),
    ]
    if comparison.relative:
        lines += ["", "### Relative cost (each stack against its own baseline), B against A", ""]
        lines += [_md_row(RELATIVE_HEADER), _md_row(["---"] * len(RELATIVE_HEADER))]
        lines += [_md_row(r) for r in relative_rows(comparison)]
    lines += ["", "### Absolute wall time, B against A", ""]
    lines += [_md_row(HEADER), _md_row(["---"] * len(HEADER)), *(_md_row(r) for r in rows(comparison))]
    if comparison.drift.sentinel_moves:
        lines += ["", "### Drift sentinel, B against A", "", _md_row(SENTINEL_HEADER)]
        lines += [_md_row(["---"] * len(SENTINEL_HEADER)), *(_md_row(r) for r in sentinel_rows(comparison))]
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
        *(f"<p><b>{html_escape.escape(line)}</b></p>" for line in drift_lines(comparison)),
    ]
    if comparison.relative:
        body += [
            "<h2>Relative cost, B against A</h2>",
            "<p class='note'>Each stack's wall time over its own experiment's baseline in the same round; "
            "B's ratios against A's. A host that got slower or faster for every stack cancels here.</p>",
            table(RELATIVE_HEADER, relative_rows(comparison)),
        ]
    body += [
        "<h2>Absolute wall time, B against A</h2>",
        "<p class='note'>B / A with its interval at the level its verdict was decided at; red and "
        "starred: significant after the correction for many comparisons.</p>",
    ]
    if panels:
        body.append(figure(plots.ratio_figure(panels, xlabel="wall time ratio B / A"), "ratio-plot"))
    body.append(table(HEADER, rows(comparison)))
    if comparison.drift.sentinel_moves:
        series = host_state.sentinel_series(
            {"A ": comparison.a.sentinels, "B ": comparison.b.sentinels}, comparison.a.sentinels
        )
        chart = plots.sentinel_figure(
            series, xlabel="minutes since A's first probe", ylabel="time / A's median"
        )
        body += [
            "<h2>Drift sentinel, B against A</h2>",
            figure(chart, "sentinel-plot"),
            table(SENTINEL_HEADER, sentinel_rows(comparison)),
        ]
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
