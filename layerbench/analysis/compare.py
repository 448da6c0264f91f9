"""Two experiments side by side (the same plan on two kernels, two machines, two months).

- relative (first): each stack's cost against its own experiment's baseline, B's against
  A's: per round, the stack's wall time over the baseline's in the same round; then B's
  per-round ratios against A's, one family of comparisons with the design of the
  statistics (rank-sum or Welch on logs, Holm, an interval at its real level). A host that
  got uniformly slower or faster between the two cancels out here.
- absolute (beside it): B's wall times against A's, the same way.
- drift: whether the host itself moved between them, read from the baseline's absolute
  comparison and the two experiments' drift sentinels (analysis/drift.py); when it did, one line
  says so first, with the figures, because the absolute times are then not comparable.
"""

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from layerbench import stats
from layerbench.analysis import drift
from layerbench.core.errors import UserError
from layerbench.core.runs import RunRecord
from layerbench.observe import sentinel
from layerbench.store import ExperimentRecord, ExperimentSummary, FleetRecord, Location, Store
from layerbench.store.records import Trend

METRIC = "wall_s"
SCHEMA_VERSION = 2  # 2: relative rows, the drift verdict; `rows` are the absolute ones as in 1


@dataclass
class Side:
    db: "Path | Location"
    experiment: ExperimentRecord
    runs: list[RunRecord]
    sentinels: list[sentinel.Sample] = field(default_factory=list)

    @property
    def baseline(self) -> str:
        return str(self.experiment.baseline)

    def round_ratios(self, stack: str, workload: str) -> list[float]:
        """The stack's wall time over the baseline's, per round both ran in (by repetition;
        a re-run of a disturbed trial stands in for its round)."""
        groups = stats.measured(self.runs)
        own = {r.rep: r.required(METRIC) for r in groups.get((stack, workload), [])}
        base = {r.rep: r.required(METRIC) for r in groups.get((self.baseline, workload), [])}
        return [own[rep] / base[rep] for rep in sorted(own.keys() & base.keys()) if base[rep] > 0]

    @property
    def label(self) -> str:
        return f"{self.experiment.id} ({self.experiment.name}, {self.experiment.host.hostname})"

    def pairs(self) -> list[tuple[str, str]]:
        plan = self.experiment.plan
        return [(s, w) for w in plan.workloads for s in plan.stacks]


@dataclass(frozen=True)
class Drift:
    """Did the host move between A and B? The baseline's absolute rows and the sentinel."""

    baseline_moves: list[stats.Summary]  # the baseline's absolute rows that moved materially
    sentinel_moves: list[drift.Movement]  # every part compared (moved or not)
    sentinel_compared: bool

    @property
    def host_changed(self) -> bool:
        return bool(self.baseline_moves or drift.moved(self.sentinel_moves))

    def line(self) -> str | None:
        if not self.host_changed:
            return None
        said = []
        if self.baseline_moves:
            said.append(
                "the baseline's elapsed time moved "
                + ", ".join(f"x{r.ratio:.2f} on {r.workload}" for r in self.baseline_moves)
            )
        if moved := drift.moved(self.sentinel_moves):
            said.append("the sentinel's " + ", ".join(m.phrase() for m in moved))
        return (
            " and ".join(said) + ": the host changed between these experiments; absolute times are not "
            "comparable, compare the relative costs"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "host_changed": self.host_changed,
            "line": self.line(),
            "baseline_moves": [
                {
                    "workload": r.workload,
                    "ratio": r.ratio,
                    "ci_low": r.ratio_ci_low,
                    "ci_high": r.ratio_ci_high,
                }
                for r in self.baseline_moves
            ],
            "sentinel_compared": self.sentinel_compared,
            "sentinel": [m.as_dict() for m in self.sentinel_moves],
        }


@dataclass
class Comparison:
    a: Side
    b: Side
    rows: list[stats.Summary]  # absolute: ratio = B / A; verdict says how B fares against A
    host_differences: list[tuple[str, Any, Any]]
    only_in_a: list[tuple[str, str]]
    only_in_b: list[tuple[str, str]]
    plans_differ: bool
    relative: list[stats.Summary] = field(default_factory=list)  # ratio = B's relative cost / A's
    drift: Drift = field(default_factory=lambda: Drift([], [], False))

    def resolution(self) -> float | None:
        """The median relative interval's reach, as a factor either way (1.30: an interval
        from x0.77 to x1.30): agreement means only that no change beyond about this showed."""
        reach = [
            (r.ratio_ci_high / r.ratio_ci_low) ** 0.5
            for r in self.relative
            if r.ratio_ci_low and r.ratio_ci_high and r.ratio_ci_high != float("inf")
        ]
        return float(np.median(reach)) if reach else None

    def agreement(self) -> str | None:
        """`9 of 9 relative costs agree (...)`, with what that can and cannot show."""
        agree, compared = self.agreeing()
        if not compared:
            return None
        reach = self.resolution()
        said = f"{agree} of {compared} relative costs agree (no significant difference after the correction)"
        return said + (f"; their median interval reaches x{reach:.2f} either way" if reach else "")

    def agreeing(self) -> tuple[int, int]:
        """(relative comparisons without a significant difference, relative comparisons decided
        or not): how far the two experiments repeat each other."""
        compared = [r for r in self.relative if r.ratio is not None]
        return sum(not r.significant for r in compared), len(compared)

    def as_dict(self) -> dict[str, Any]:
        def side(s: Side) -> dict[str, Any]:
            keys = ("id", "name", "status", "started", "finished", "baseline", "fleet", "host_name")
            return s.experiment.header(*keys) | {"db": str(s.db), "host": s.experiment.host.facts()}

        agree, compared = self.agreeing()
        return {
            "schema_version": SCHEMA_VERSION,
            "metric": METRIC,
            "a": side(self.a),
            "b": side(self.b),
            "drift": self.drift.as_dict(),
            "relative": [row.as_dict() for row in self.relative],
            "relative_agree": {"agree": agree, "compared": compared, "median_reach": self.resolution()},
            "rows": [row.as_dict() for row in self.rows],
            "host_differences": [{"key": k, "a": va, "b": vb} for k, va, vb in self.host_differences],
            "only_in_a": [{"stack": s, "workload": w} for s, w in self.only_in_a],
            "only_in_b": [{"stack": s, "workload": w} for s, w in self.only_in_b],
            "plans_differ": self.plans_differ,
        }


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"scratch_fs": {"type": "ext4"}} -> {"scratch_fs.type": "ext4"}; lists by index."""
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat |= flatten(item, f"{prefix}{key}.")
        return flat
    if isinstance(value, list):
        flat = {}
        for index, item in enumerate(value):
            flat |= flatten(item, f"{prefix}{index}.")
        return flat
    return {prefix.rstrip("."): value}


def host_differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    flat_a, flat_b = flatten(a), flatten(b)
    return [
        (key, flat_a.get(key), flat_b.get(key))
        for key in sorted(flat_a.keys() | flat_b.keys())
        if flat_a.get(key) != flat_b.get(key)
    ]


def load_side(db: "Path | Location", experiment_id: int | None) -> Side:
    store = Store(db, read_only=True)
    try:
        ident = experiment_id if experiment_id is not None else store.latest_experiment_id()
        if ident is None:
            raise UserError(f"{db}: holds no experiment yet")
        return Side(db, store.experiment(ident), store.runs(ident), store.sentinels(ident))
    finally:
        store.close()


def compare(a: Side, b: Side) -> Comparison:
    groups_a, groups_b = stats.measured(a.runs), stats.measured(b.runs)
    pairs_a, pairs_b = a.pairs(), b.pairs()
    entries = [
        (
            stack,
            workload,
            [r.required(METRIC) for r in groups_b.get((stack, workload), [])],
            [r.required(METRIC) for r in groups_a.get((stack, workload), [])],
        )
        for stack, workload in pairs_b
        if (stack, workload) in pairs_a
    ]
    # A is the reference for B: every pair present in both is one comparison of one family.
    design = stats.Design.of_plan(b.experiment.plan)
    rows = stats.compare_samples(entries, METRIC, design)
    return Comparison(
        a=a,
        b=b,
        rows=rows,
        host_differences=host_differences(a.experiment.host.facts(), b.experiment.host.facts()),
        only_in_a=[p for p in pairs_a if p not in pairs_b],
        only_in_b=[p for p in pairs_b if p not in pairs_a],
        plans_differ=a.experiment.plan != b.experiment.plan,
        relative=relative(a, b, design),
        drift=drift_between(a, b, rows, design),
    )


def relative(a: Side, b: Side, design: stats.Design) -> list[stats.Summary]:
    """Per (stack, workload) both ran, other than their baselines: B's per-round ratios to its
    baseline against A's, one family (the ratio of ratios, B / A)."""
    pairs_a = set(a.pairs())
    entries = [
        (stack, workload, b.round_ratios(stack, workload), a.round_ratios(stack, workload))
        for stack, workload in b.pairs()
        if (stack, workload) in pairs_a and stack not in (a.baseline, b.baseline)
    ]
    return stats.compare_samples(entries, METRIC, design)  # ratios of wall times: slower, faster


def drift_between(a: Side, b: Side, absolute: list[stats.Summary], design: stats.Design) -> Drift:
    """The baseline moved when its absolute comparison is significant and beyond the plan's
    equivalence margin; the sentinel, when a part moved (drift.between)."""
    margin = max(design.equivalence, 0.05)
    baseline_moves = [
        row
        for row in absolute
        if row.stack == b.baseline
        and row.significant
        and row.ratio is not None
        and abs(float(np.log(row.ratio))) > np.log1p(margin)
    ]
    moves = drift.between(a.sentinels, b.sentinels)
    return Drift(baseline_moves, moves, bool(moves))


def trends(db: "Path | Location", records: list[ExperimentSummary]) -> list[ExperimentSummary]:
    """`history`: each experiment against the previous finished one of the same plan name,
    as compare would put it: did the host move, and how many relative costs repeat."""
    previous: dict[str, int] = {}
    found = []
    for record in records:
        earlier = previous.get(record.name)
        trend: Trend | None = None
        if earlier is not None and record.status == "done":
            comparison = compare(load_side(db, earlier), load_side(db, record.id))
            agree, compared = comparison.agreeing()
            trend = Trend(
                previous=earlier,
                relative_reach=comparison.resolution(),
                host_changed=comparison.drift.host_changed,
                line=comparison.drift.line(),
                relative_agree=agree,
                relative_compared=compared,
            )
        if record.status == "done":
            previous[record.name] = record.id
        found.append(dataclasses.replace(record, against_previous=trend))
    return found


def compare_fleet(db: "Path | Location", fleet: str) -> tuple[FleetRecord, list[Comparison]]:
    """Every host of a fleet against its reference host (the first one named), same plan and
    seed on each: what differs is the machine, and the host differences say how."""
    store = Store(db, read_only=True)
    try:
        record = store.fleet(fleet)
    finally:
        store.close()
    members = record.experiments
    reference = members.get(record.reference)
    if reference is None:
        raise UserError(f"fleet {fleet}: its reference host {record.reference} stored no experiment")
    side_a = load_side(db, reference.id)
    comparisons = [
        compare(side_a, load_side(db, members[host].id))
        for host in record.hosts
        if host != record.reference and host in members
    ]
    return record, comparisons
