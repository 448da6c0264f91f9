"""A bisect's report: what it found (the first bad variant, its size against its parent with
the interval, any further step), the log of its comparisons, the why lines of the first bad
variant against its parent, and the commands that reproduce that comparison."""

import shlex
from dataclasses import dataclass, field
from typing import Any

from layerbench.reports import base
from layerbench.reports.document import Cell, Document, Lines, Section, Table
from layerbench.store import Store
from layerbench.store.records import BisectBoundary, BisectRecord, BisectState, BisectStep


@dataclass
class BisectReport:
    record: BisectRecord
    db: str
    why: list[str] = field(default_factory=list)  # of the first boundary's confirmation

    def as_dict(self) -> dict[str, Any]:
        return {"schema_version": 1, "bisect": self.record.model_dump(), "why": self.why}


def _confirmation(state: BisectState, boundary: BisectBoundary) -> BisectStep | None:
    """The comparison of a boundary's two variants side by side (the slower one as candidate)."""
    pair = (
        (boundary.last, boundary.first) if boundary.direction == "slower" else (boundary.first, boundary.last)
    )
    return state.step(*pair)


def gather(store: Store, ident: int, db: str) -> BisectReport:
    record = store.bisect(ident)
    report = BisectReport(record, db)
    state = record.state
    first = next((b for b in state.boundaries if b.direction == "slower"), None)
    step = None if first is None else _confirmation(state, first)
    if step is not None and step.experiment is not None:
        report.why = base.gather(store, step.experiment).why_lines(state.workload)
    return report


def _ratio(step: BisectStep | None) -> str:
    if step is None or step.ratio is None:
        return "-"
    level = f" ({step.level:.0%})" if step.level is not None else ""
    return f"x{step.ratio:.2f} [{step.low:.2f}-{step.high:.2f}]{level}"


def _variant(state: BisectState, index: int) -> str:
    variant = state.variants[index]
    return f"{variant.label} ({variant.title})" if variant.title else variant.label


def _found(report: BisectReport) -> list[str]:
    record, state = report.record, report.record.state
    if record.status != "done":
        return [
            f"not finished ({record.status}): "
            f"`layerbench bisect --resume {record.id} --db {report.db}` goes on"
        ]
    threshold = f"x{1 + state.margin:.2f}"
    if state.ends != "slower":
        ends = state.step(0, len(state.variants) - 1)
        said = {
            "not slower": f"the bad end is not slower than the good one ({_ratio(ends)}, not above "
            f"{threshold}): nothing to bisect; the ends must differ by more than the margin",
            "undecided": f"the ends are not told apart within the budget ({_ratio(ends)} holds "
            f"{threshold}): a larger budget, or a margin further from the difference, decides it",
        }
        note = ends.note if ends is not None else ""
        return [said.get(str(state.ends), f"the ends could not be compared: {note}")]
    lines = []
    for boundary in state.boundaries:
        went = "slower" if boundary.direction == "slower" else "faster again"
        step = _confirmation(state, boundary)
        if not boundary.confirmed and boundary.first - boundary.last > 1:
            skipped = ", ".join(state.variants[i].label for i in range(boundary.last + 1, boundary.first))
            lines.append(
                f"{went} somewhere after {_variant(state, boundary.last)} up to "
                f"{_variant(state, boundary.first)}: {skipped} could not be put on either side"
            )
            continue
        size = (
            f"{_ratio(step)} against its parent"
            if boundary.direction == "slower"
            else (f"its parent {_ratio(step)} against it")
        )
        confirmed = (
            ""
            if boundary.confirmed
            else f"; side by side the step is not above {threshold}: a cost in small steps?"
        )
        lines.append(f"{went} at {_variant(state, boundary.first)}: {size}{confirmed}")
    if sum(b.direction == "slower" for b in state.boundaries) > 1 or any(
        b.direction == "faster" for b in state.boundaries
    ):
        lines.append(f"the cost changed {len(state.boundaries)} times between the ends: not one step")
    return lines


def _log(state: BisectState) -> Table:
    rows = [
        [
            Cell(str(number)),
            Cell(state.variants[step.candidate].label),
            Cell(state.variants[step.reference].label),
            Cell(step.verdict, style={"slower": "slower", "not slower": "equivalent"}.get(step.verdict, "")),
            Cell(_ratio(step), step.ratio),
            Cell(str(step.reps), step.reps),
            Cell(f"{step.seconds:.0f}", step.seconds),
            Cell("-" if step.experiment is None else str(step.experiment)),
            Cell(step.note),
        ]
        for number, step in enumerate(state.steps, start=1)
    ]
    header = [
        "#",
        "candidate",
        "against",
        "verdict",
        "ratio [interval] (level)",
        "reps",
        "s",
        "experiment",
        "note",
    ]
    return Table(header, rows, left=(0, 1, 2, 3, 8))


def _reproduce(report: BisectReport) -> list[str]:
    record, state = report.record, report.record.state
    db = shlex.quote(report.db)
    first = next((b for b in state.boundaries if b.direction == "slower" and b.confirmed), None)
    step = None if first is None else _confirmation(state, first)
    if first is None or step is None or step.experiment is None:
        return []
    good, bad = state.variants[first.last].name, state.variants[first.first].name
    return [
        f"layerbench report {step.experiment} --db {db}",
        f"layerbench bisect {shlex.quote(record.plan_source)} --good {shlex.quote(good)} "
        f"--bad {shlex.quote(bad)} --db {db}",
    ]


def document(report: BisectReport) -> Document:
    record, state = report.record, report.record.state
    lead = [
        f"{state.workload} on stack {state.stack}, {len(state.variants)} variants from --good "
        f"{record.good} to --bad {record.bad}; slower: {state.metric} above x{1 + state.margin:.2f} "
        "of the current good end",
        f"started {record.started}, {record.status}"
        + (f" {record.finished}" if record.finished else "")
        + f"; {len(state.steps)} comparisons, {sum(s.seconds for s in state.steps) / 60:.1f} min",
    ]
    sections = [Section("Found", [Lines(_found(report))]), Section("Comparisons", [_log(state)])]
    skipped = [v for v in state.variants if v.build not in (None, "ok")]
    if skipped:
        sections[-1].blocks.append(Lines([f"{v.label}: {v.build}" for v in skipped], title="Did not build"))
    if report.why:
        sections.append(Section("Why (the first bad variant against its parent)", [Lines(report.why)]))
    if commands := _reproduce(report):
        sections.append(Section("Reproduce", [Lines(commands, preformatted=True)]))
    return Document(f"Bisect {record.id}: {record.name}", lead, sections)
