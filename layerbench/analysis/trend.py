"""Trends: one plan's relative costs across its experiments, and the steps in them.

A series is one host's (stack, workload) over the finished experiments of one plan (by its
name), oldest first; each point is that experiment's elapsed-time ratio of the stack to its
baseline, as its report states it (sequential.summaries, the reports' own path). Relative
costs, not absolute times: a host that got slower for every stack alike moves no ratio.

A step is found in two stages. ruptures' PELT proposes change points on the log ratios
(its penalty from the series' own noise). The proposals are then tested with the project's
statistics, from the top down (binary segmentation): of the proposals inside a range of
experiments, the one that splits it most clearly is tested, every experiment of the range
after it against every one before it (stats.compare_samples: rank-sum or Welch on logs, the
interval at its real level); a real step splits the range and each side is searched again.
The proposals were chosen where the series moved most, so each test is at alpha divided by
every place any series of the plan could be cut (Bonferroni over them), and a step must be
larger than the plan's equivalence margin (5 % at least). The experiment is the unit: the
runs of one experiment never pose as independent evidence. Simulated (three series per plan,
each experiment's ratio with its own log-normal noise of 2-10 %, 10 or 20 experiments, 1,000
plans each): 0-4.2 % of plans without a step showed one; a 1.5x step halfway was found, alone
and in its place, in 84-100 %. Binary segmentation's blind spot: a step undone a few
experiments later (a regression, then its fix) may split no range clearly and go unreported.

A regression is open when the last step of a series made the stack slower: nothing since
has brought it back.
"""

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from layerbench import stats
from layerbench.analysis.compare import host_differences
from layerbench.core.errors import UserError
from layerbench.stats import sequential
from layerbench.store import Store

METRIC = "wall_s"
MIN_SEGMENT = 3  # experiments on each side of a proposed step: fewer give no honest test
FINISHED = "done"
MARGIN = 0.05  # the least step reported, when the plan's equivalence margin is narrower


@dataclass(frozen=True)
class Point:
    experiment: int
    started: str
    ratio: float


@dataclass
class Series:
    plan: str
    host: str
    stack: str
    workload: str
    points: list[Point] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.host, self.stack, self.workload)


@dataclass
class Step:
    """A tested proposal: the experiments before it against those after it."""

    series: Series
    index: int  # the first point after the step
    row: stats.Summary  # ratio = the segment after / the segment before
    margin: float  # a step within +-margin is not material, significant or not
    changed: list[tuple[str, Any, Any]] = field(default_factory=list)  # host facts, before -> after

    @property
    def before(self) -> Point:
        return self.series.points[self.index - 1]

    @property
    def after(self) -> Point:
        return self.series.points[self.index]

    @property
    def real(self) -> bool:
        """Significant after the correction and beyond the margin: the proposals were chosen
        where the series moved most, so a significant wobble inside the margin is not a step."""
        ratio = self.row.ratio
        return self.row.significant and ratio is not None and abs(math.log(ratio)) > math.log1p(self.margin)

    @property
    def regression(self) -> bool:
        return self.row.decision == "slower"

    def as_dict(self) -> dict[str, Any]:
        row = self.row
        return {
            "plan": self.series.plan,
            "host": self.series.host,
            "stack": self.series.stack,
            "workload": self.series.workload,
            "before": self.before.experiment,
            "after": self.after.experiment,
            "ratio": row.ratio,
            "ratio_ci_low": row.ratio_ci_low,
            "ratio_ci_high": row.ratio_ci_high,
            "ratio_ci_level": row.ratio_ci_level,
            "p_adjusted": row.p_adjusted,
            "method": row.method,
            "decision": row.decision,
            "changed": [{"key": k, "before": a, "after": b} for k, a, b in self.changed],
        }


@dataclass
class Trend:
    plan: str
    series: list[Series]
    steps: list[Step]  # every tested proposal; .real ones are the steps
    proposals: int

    def real_steps(self) -> list[Step]:
        return [s for s in self.steps if s.real]

    def open_regressions(self) -> list[Step]:
        """Per series, its last real step when that one made the stack slower."""
        last: dict[tuple[str, str, str], Step] = {}
        for step in self.real_steps():
            known = last.get(step.series.key)
            if known is None or step.index > known.index:
                last[step.series.key] = step
        return [s for s in last.values() if s.regression]

    def only(self, stack: str | None, workload: str | None) -> "Trend":
        """The same trend shown for one stack or workload: its steps stay those of the whole
        plan's family, so a view never decides differently from the plan."""

        def kept(series: Series) -> bool:
            return stack in (None, series.stack) and workload in (None, series.workload)

        return Trend(
            self.plan,
            [s for s in self.series if kept(s)],
            [s for s in self.steps if kept(s.series)],
            self.proposals,
        )


def change_points(values: list[float], *, min_size: int = MIN_SEGMENT) -> list[int]:
    """Where PELT would start a new segment of these ratios (on the log scale), as indices of
    the first point after each change; proposals only, to be tested."""
    n = len(values)
    if n < 2 * min_size or any(v <= 0 or not math.isfinite(v) for v in values):
        return []
    logs = np.log(np.asarray(values, dtype=float))
    # The noise, robustly from successive differences (a step moves only one of them).
    sigma = float(np.median(np.abs(np.diff(logs)))) / (0.6745 * math.sqrt(2))
    sigma = max(sigma, 1e-4)  # a series without noise still needs a finite penalty
    import ruptures  # about a second to import: only when a trend is asked for

    penalty = 2 * sigma**2 * math.log(n)
    cost = _summed_l2_cost(ruptures)(min_size)
    algorithm = ruptures.Pelt(custom_cost=cost, min_size=min_size, jump=1).fit(logs)
    return [int(b) for b in algorithm.predict(pen=penalty) if b < n]


def _summed_l2_cost(ruptures: Any) -> type:
    """ruptures' "l2" cost (a segment's squared deviations from its mean) from running sums:
    the same values in constant time per segment, where ruptures' own takes a variance of
    the slice each time (PELT asks for tens of thousands: 2.7 s for a plan of 15 series of
    100 experiments, most of a trend page's first answer)."""
    from ruptures.exceptions import NotEnoughPoints

    class SummedL2(ruptures.base.BaseCost):  # type: ignore[misc]
        model = "l2-summed"

        def __init__(self, min_size: int) -> None:
            self.min_size = min_size

        def fit(self, signal: np.ndarray) -> "SummedL2":
            values = np.asarray(signal, dtype=float).reshape(-1)
            self.signal = values.reshape(-1, 1)  # PELT reads its length
            self.sums = np.concatenate([[0.0], np.cumsum(values)]).tolist()
            self.squares = np.concatenate([[0.0], np.cumsum(values * values)]).tolist()
            return self

        def error(self, start: int, end: int) -> float:
            if end - start < self.min_size:
                raise NotEnoughPoints
            total = self.sums[end] - self.sums[start]
            return max(0.0, self.squares[end] - self.squares[start] - total * total / (end - start))

    return SummedL2


def gather(store: Store, plan: str) -> list[Series]:
    """Every series of the plan's finished experiments, by host, stack and workload: from the
    rows each stored when it ended, or, for an experiment stored before they were, from its
    runs (the same rows)."""
    records = [r for r in store.history(name=plan) if r.status == FINISHED]
    if not records:
        raise UserError(f"{store.location}: no finished experiment of a plan named {plan!r}")
    stored = store.fact_of_each(sequential.ROWS, [r.id for r in records])
    found: dict[tuple[str, str, str], Series] = {}
    for record in records:
        if record.id in stored:
            rows = stored[record.id]
        else:
            rows = sequential.elapsed_rows(store.experiment(record.id), store.runs(record.id))
        host = str(record.host)
        for row in rows:
            if row.metric != METRIC or row.decision == "baseline" or row.ratio is None:
                continue
            if not math.isfinite(row.ratio) or row.ratio <= 0:
                continue
            series = found.setdefault(
                (host, row.stack, row.workload), Series(plan, host, row.stack, row.workload)
            )
            series.points.append(Point(record.id, str(record.started), float(row.ratio)))
    return sorted(found.values(), key=lambda s: s.key)


def trend(store: Store, plan: str) -> Trend:
    """The plan's series and every proposed step, tested under the design (alpha, margin) of
    the plan's newest experiment; the host facts that changed across each real step."""
    series = gather(store, plan)
    newest = max(p.experiment for one in series for p in one.points) if series else None
    design = stats.Design.of_plan(store.experiment(newest).plan if newest is not None else None)
    found = find_steps(plan, series, design)
    for step in found.real_steps():
        step.changed = _changed(store, step.before.experiment, step.after.experiment)
    return found


def find_steps(plan: str, series: list[Series], design: stats.Design) -> Trend:
    """PELT's proposals in every series, tested from the top down (see _split), each at alpha
    over the number of places any series could be cut."""
    searched = sum(max(0, len(one.points) - 2 * MIN_SEGMENT + 1) for one in series)
    level = stats.Design(design.alpha / max(searched, 1), "none", design.equivalence, False)
    margin = max(design.equivalence, MARGIN)
    steps: list[Step] = []
    proposals = 0
    for one in series:
        cuts = change_points([p.ratio for p in one.points])
        proposals += len(cuts)
        steps += _split(one, 0, len(one.points), cuts, level, margin)
    return Trend(plan, series, steps, proposals)


def _split(
    one: Series, low: int, high: int, cuts: list[int], level: stats.Design, margin: float
) -> list[Step]:
    """Binary segmentation over PELT's proposals: of those inside [low, high), the one that
    splits it most clearly (smallest p) is tested, the whole range before it against the whole
    range after; a real step splits the range, and each side is searched again. The choice
    among the places of the range is what the Bonferroni level over every place pays for."""
    inside = [c for c in cuts if low + MIN_SEGMENT <= c <= high - MIN_SEGMENT]
    if not inside:
        return []
    ratios = [p.ratio for p in one.points]
    tested = [
        (
            cut,
            stats.compare_samples(
                [(one.stack, one.workload, ratios[cut:high], ratios[low:cut])], METRIC, level
            )[0],
        )
        for cut in inside
    ]
    cut, row = min(tested, key=lambda t: 1.0 if t[1].p_value is None else t[1].p_value)
    step = Step(one, cut, row, margin)
    if not step.real:
        return [step]
    return [*_split(one, low, cut, cuts, level, margin), step, *_split(one, cut, high, cuts, level, margin)]


def _changed(store: Store, before: int, after: int) -> list[tuple[str, Any, Any]]:
    """The host facts and the layerbench version that differ between two experiments."""
    a, b = store.experiment(before), store.experiment(after)
    facts_a = a.host.facts() | {"layerbench_version": a.version}
    facts_b = b.host.facts() | {"layerbench_version": b.version}
    return host_differences(facts_a, facts_b)


def plans(store: Store) -> list[str]:
    """The names of the plans with a finished experiment, in the order they first ran."""
    return store.plan_names(FINISHED)
