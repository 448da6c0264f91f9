"""The report of `layerbench compare`, one Document every format renders. It shows, in this
order: the drift line (when the host moved), the relative costs, the absolute times, the
sentinel's parts side by side, and the host differences."""

from layerbench import stats
from layerbench.analysis.compare import Comparison
from layerbench.core.runs import known
from layerbench.reports import host_state, plots
from layerbench.reports.base import fmt_median_ci, fmt_ratio, host_lines
from layerbench.reports.document import Block, Cell, Document, Figure, Lines, Section, Table

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


def absolute_rows(comparison: Comparison) -> list[list[str]]:
    groups_a = stats.measured(comparison.a.runs)
    result = []
    for row in comparison.rows:
        values_a = known(groups_a.get((row.stack, row.workload), []), row.metric)
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


def _verdicts(table_rows: list[list[str]], verdict_column: int) -> tuple[list[list[Cell]], list[str]]:
    """Cells of rows whose verdict is a sentence: the word in the table, the rest a note."""
    rows, notes = [], []
    for cells in table_rows:
        verdict = cells[verdict_column]
        word, _, rest = verdict.partition(":")
        style = word.split()[-1] if word else ""
        row = [Cell(c) for c in cells]
        row[verdict_column] = Cell(word, style=style if style in ("slower", "faster", "equivalent") else "")
        rows.append(row)
        if rest:
            notes.append(f"{cells[0]} / {cells[1]}: {verdict}")
    return rows, notes


def _relative(comparison: Comparison) -> list[Section]:
    if not comparison.relative:
        return []
    rows, row_notes = _verdicts(relative_rows(comparison), 6)
    said = (
        "Each stack's wall time over its own experiment's baseline in the same round; B's ratios "
        "against A's. A host that got slower or faster for every stack cancels here."
    )
    return [
        Section(
            "Relative cost, B against A",
            [Lines([said]), Table(RELATIVE_HEADER, rows, notes=row_notes, left=(0, 1, 6))],
        )
    ]


def _absolute(comparison: Comparison) -> Section:
    panels: dict[str, list[plots.RatioPoint]] = {}
    for row in comparison.rows:
        panels.setdefault(f"workload {row.workload}", []).append(
            plots.RatioPoint(
                row.stack, row.ratio, row.ratio_ci_low, row.ratio_ci_high, significant=row.significant
            )
        )
    rows, row_notes = _verdicts(absolute_rows(comparison), 6)
    said = (
        "B / A with its interval at the level its verdict was decided at; significant after the "
        "correction for many comparisons where it says slower or faster."
    )
    blocks: list[Block] = [Lines([said])]
    if panels:
        blocks.append(
            Figure(
                "ratio-plot",
                "B / A per stack",
                lambda: plots.ratio_figure(panels, xlabel="wall time ratio B / A"),
            )
        )
    blocks.append(Table(HEADER, rows, notes=row_notes, left=(0, 1, 6)))
    return Section("Absolute wall time, B against A", blocks)


def _sentinel(comparison: Comparison) -> list[Section]:
    if not comparison.drift.sentinel_moves:
        return []
    series = host_state.sentinel_series(
        {"A ": comparison.a.sentinels, "B ": comparison.b.sentinels}, comparison.a.sentinels
    )
    figure = Figure(
        "sentinel-plot",
        "the drift sentinel of A and B",
        lambda: plots.sentinel_figure(
            series, xlabel="minutes since A's first probe", ylabel="time / A's median"
        ),
    )
    rows = [[Cell(c) for c in r] for r in sentinel_rows(comparison)]
    return [Section("Drift sentinel, B against A", [figure, Table(SENTINEL_HEADER, rows)])]


def document(comparison: Comparison) -> Document:
    """The comparison's report: the drift line first, the relative costs, the absolute
    times, the sentinel's parts side by side, the hosts and how they differ."""
    sections = [*_relative(comparison), _absolute(comparison), *_sentinel(comparison)]
    differences: Block = (
        Table(["key", "A", "B"], [[Cell(c) for c in r] for r in host_rows(comparison)], left=(0, 1, 2))
        if comparison.host_differences
        else Lines(["none"])
    )
    sections += [
        Section("Host differences", [differences]),
        Section(
            "Hosts",
            [
                Lines(host_lines(comparison.a.experiment.host), "A"),
                Lines(host_lines(comparison.b.experiment.host), "B"),
            ],
        ),
    ]
    if found := notes(comparison):
        sections.append(Section("Notes", [Lines(found)]))
    lead = [title(comparison), *drift_lines(comparison)]
    return Document("layerbench comparison", lead, sections, wide=True)  # 8 columns of intervals
