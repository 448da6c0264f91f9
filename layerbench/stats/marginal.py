"""What one layer adds: each incremental stack against the stack one layer shorter.

A plan's incremental stacks (see plan/expansion.py) form chains, each step one layer more. The
marginal comparison of a step is the same test and interval as a comparison with the
baseline (paired by repetition when the experiment ran interleaved), with the shorter
stack as the reference. The marginal comparisons of one metric are their own family,
corrected together, apart from the comparisons with the baseline: they answer another
question, and folding them into one family would widen both."""

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from layerbench.core.runs import RunRecord, known
from layerbench.stats import Design, Entry, Summary, _pairs, compare_family, measured

METRICS = ("wall_s", "throughput")  # what a layer adds to the elapsed time and to the rate


class Step(Protocol):
    """A step of a chain (the plan's Increment): the stack one layer shorter, the layer added."""

    @property
    def previous(self) -> str: ...

    @property
    def layer(self) -> str: ...


@dataclass
class Marginal:
    """A step of an incremental chain: `stack` is `previous` with `layer` on top; `row`
    compares the two (its ratio is stack / previous)."""

    stack: str
    previous: str
    layer: str
    row: Summary

    def as_dict(self) -> dict[str, Any]:
        return {"stack": self.stack, "previous": self.previous, "layer": self.layer} | asdict(self.row)


def marginals(
    runs: list[RunRecord],
    increments: Mapping[str, Step],
    workloads: list[str],
    design: Design,
) -> list[Marginal]:
    """Every step of every incremental chain, per workload and metric, in chain order."""
    if not increments:
        return []
    groups = measured(runs)
    found: list[Marginal] = []
    for metric in METRICS:
        entries: list[Entry] = []
        steps: list[tuple[str, str, str]] = []
        for workload in workloads:
            for stack, step in increments.items():
                own = groups.get((stack, workload), [])
                before = groups.get((step.previous, workload), [])
                values = known(own, metric)
                reference = known(before, metric)
                if not (values or reference):
                    continue  # a metric this workload does not report
                pairs = _pairs(own, before, metric) if design.paired else None
                entries.append(Entry(stack, workload, values, reference, *(pairs or (None, None))))
                steps.append((stack, step.previous, step.layer))
        rows = compare_family(entries, metric, design)
        found += [Marginal(*step, row) for step, row in zip(steps, rows, strict=True)]
    order = {stack: i for i, stack in enumerate(increments)}
    return sorted(
        found, key=lambda m: (workloads.index(m.row.workload), order[m.stack], METRICS.index(m.row.metric))
    )
