"""Statistics: one design from the schedule to the verdict.

For every stack but the baseline, every workload and every metric, the comparison with
the baseline is one test and the interval that inverts it (see methods.py): paired by
repetition when the experiment ran interleaved and both stacks have the same repetitions,
unpaired otherwise. The comparisons of one metric across an experiment are one family,
corrected together (family.py: Holm by default); each row's interval is drawn at the
level its decision was made at, so that a row is significant exactly when its interval
excludes 1. A row that is not significant is "equivalent" when its interval lies within
the equivalence margin, "inconclusive" when it does not, and "undecidable" when the
method cannot reach the level at all with so few repetitions. Runs flagged as disturbed
(other work during the timed run) are left out."""

import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Final, Protocol

import numpy as np

from layerbench.core import metrics
from layerbench.core.runs import DISTURBED, RunRecord, known
from layerbench.stats import family, intervals, methods

ALPHA = 0.05
CORRECTION: Final = "holm"  # Final: typed as the literal, one of the plan's choices
# The default equivalence margin: within +-10 %. On a small shared VM a file system's runs
# vary by about 12 % each; there the two one-sided tests at a budget's later looks reach +-5 %
# after 41 paired repetitions at a true ratio of 1 and about 240 at 1.03, +-10 % after 14 and
# 24 (docs/statistics.md, "The margin"). Every verdict also prints the bound the data
# support, usually tighter.
EQUIVALENCE = 0.10
CONFIDENCE = intervals.CONFIDENCE
NOISY_CV = 0.05
MAX_REPS_SUGGESTED = 1000
LOOKS = 6  # a budgeted experiment's planned maximum of looks (see sequential.py)

HEADLINE_METRIC = "wall_s"
SIGNIFICANT = ("slower", "faster", "higher", "lower")


class DesignedPlan(Protocol):
    """What a plan says of how its comparisons are decided: the plan as checked
    (plan.Plan) or as an experiment stored it (store.StoredPlan)."""

    @property
    def alpha(self) -> float: ...
    @property
    def correction(self) -> str: ...
    @property
    def equivalence(self) -> float: ...
    @property
    def order(self) -> str: ...


@dataclass(frozen=True)
class Design:
    """How an experiment's comparisons are decided (from its plan)."""

    alpha: float = ALPHA
    correction: str = CORRECTION
    equivalence: float = EQUIVALENCE  # a share: 0.1 means within +-10 %
    paired: bool = False  # interleaved: a stack's and the baseline's runs of one repetition pair up

    @classmethod
    def of_plan(cls, plan: DesignedPlan | None) -> "Design":
        """The plan's design; without a plan, the defaults."""
        if plan is None:
            return cls(paired=True)
        return cls(plan.alpha, plan.correction, plan.equivalence, plan.order == "interleaved")


@dataclass
class Summary:
    stack: str
    workload: str
    metric: str
    n: int
    median: float | None
    mean: float | None
    stdev: float | None
    cv: float | None
    ci_low: float | None  # of the median: distribution-free, at ci_level
    ci_high: float | None
    ci_level: float | None  # the median interval's real coverage (0.9375 for 5 runs: the range)
    ratio: float | None  # the method's estimate of this stack / the baseline
    ratio_ci_low: float | None
    ratio_ci_high: float | None
    ratio_ci_level: float | None  # the level the decision was made at (after the correction)
    p_value: float | None
    p_adjusted: float | None
    verdict: str  # the decision in words
    decision: str = (
        "insufficient data"  # slower faster higher lower equivalent inconclusive undecidable baseline
    )
    method: str | None = None  # signed-rank, rank-sum, paired-t, welch-t
    paired: bool = False
    correction: str = CORRECTION
    equivalence: float = EQUIVALENCE
    alpha: float = ALPHA
    median_ratio: float | None = None  # ratio of the two medians, for reference
    # The baseline's median over the runs this comparison used (the repetitions both have, when
    # paired): what a difference from this row's median is taken against. The baseline's own row
    # holds every baseline run, more than a stack given fewer rounds was measured beside.
    reference_median: float | None = None
    reps_to_decide: int | None = None  # inconclusive: about this many repetitions would decide
    tested_alpha: float | None = None  # the row's own alpha, after the correction
    bound: str | None = None  # not significant: how far either way the interval allows

    @property
    def significant(self) -> bool:
        return self.decision in SIGNIFICANT

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def measured(runs: list[RunRecord], *, disturbed: bool = False) -> dict[tuple[str, str], list[RunRecord]]:
    """Successful, non-warm-up runs grouped by (stack, workload); without disturbed ones
    unless disturbed=True, or unless most runs of the group are flagged (see mostly_disturbed)."""
    groups: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for run in runs:
        if run.measured:
            groups[(run.stack, run.workload)].append(run)
    if disturbed:
        return groups
    kept: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for key, group in groups.items():
        flags = [is_disturbed(run) for run in group]
        calm = [run for run, flag in zip(group, flags, strict=True) if not flag]
        kept[key] = group if most_flagged(flags) else calm
    return kept


def is_disturbed(run: RunRecord) -> bool:
    return bool(run.fact(DISTURBED))


def mostly_disturbed(group: list[RunRecord]) -> bool:
    """Most runs of one (stack, workload) flagged disturbed: the CPU that other work seemed
    to use is then the stack's own kernel threads (loop workers, writeback) doing the run's
    work, not a disturbance; those runs are all kept."""
    return most_flagged([is_disturbed(run) for run in group])


def most_flagged(flags: list[bool]) -> bool:
    """More than half of them: the one rule for "most runs were disturbed"."""
    return 2 * sum(flags) > len(flags)


def describe(stack: str, workload: str, metric: str, values: list[float]) -> Summary:
    """A sample on its own: median with its interval, mean, spread."""
    data = np.asarray(values, dtype=float)
    n = len(data)
    if n == 0:
        return Summary(
            stack,
            workload,
            metric,
            0,
            median=None,
            mean=None,
            stdev=None,
            cv=None,
            ci_low=None,
            ci_high=None,
            ci_level=None,
            ratio=None,
            ratio_ci_low=None,
            ratio_ci_high=None,
            ratio_ci_level=None,
            p_value=None,
            p_adjusted=None,
            verdict="insufficient data",
        )
    # Sorted once for the median and its interval (np.median's own value: the middle one, or
    # the mean of the middle two); this runs for every row of every look of the simulations.
    ordered = np.sort(data)
    median = intervals.sorted_median(ordered)
    mean = float(data.mean())
    stdev = float(data.std(ddof=1)) if n > 1 else None
    cv = stdev / mean if stdev is not None and mean else None
    low, high, level = intervals.sorted_median_interval(ordered)
    return Summary(
        stack,
        workload,
        metric,
        n,
        median,
        mean,
        stdev,
        cv,
        low,
        high,
        level,
        None,
        None,
        None,
        None,
        None,
        None,
        "insufficient data",
    )


def _direction(metric: str, log_ratio: float) -> str:
    better = metrics.BY_NAME[metric].better if metric in metrics.BY_NAME else None
    if better is None:
        return "higher" if log_ratio > 0 else "lower"
    worse = log_ratio > 0 if better == "lower" else log_ratio < 0
    return "slower" if worse else "faster"


def _exp(value: float) -> float:
    return math.exp(value) if value < 700 else math.inf


def decide(row: Summary, fit: methods.Fit, alpha: float, p_adjusted: float, design: Design) -> None:
    """Fill in the comparison: the interval at the row's own level, and the verdict.

    Equivalence is the two one-sided tests (TOST) at the row's alpha: the layer costs less
    than the margin either way when the interval at 1 - 2 alpha lies within it, and that
    interval is the one an equivalent row shows, at its own level. Being narrower than the
    test's, it may miss 1 (a small difference the test at alpha could not confirm): its bound
    then reads as the range it holds ("2% to 8% slower"), still within the margin. A false "equivalent"
    needs one of the two one-sided tests to err, each at most alpha, on the side the truth
    lies beyond."""
    low, high, level = fit.interval(alpha)
    row.ratio, row.ratio_ci_low, row.ratio_ci_high = _exp(fit.estimate), _exp(low), _exp(high)
    row.ratio_ci_level, row.method, row.p_value, row.p_adjusted = level, fit.method, fit.p_value, p_adjusted
    row.correction, row.equivalence, row.alpha = design.correction, design.equivalence, design.alpha
    row.tested_alpha = alpha
    margin = design.equivalence
    if low > 0 or high < 0:
        row.decision = _direction(row.metric, fit.estimate)
        row.verdict = row.decision
        return
    if fit.floor > alpha:
        row.decision = "undecidable"
        row.verdict = f"undecidable with {row.n} repetitions"
        return
    tost_low, tost_high, tost_level = fit.interval(min(1.0, 2 * alpha))
    if margin > 0 and 1 - margin <= _exp(tost_low) and _exp(tost_high) <= 1 + margin:
        row.ratio_ci_low, row.ratio_ci_high, row.ratio_ci_level = _exp(tost_low), _exp(tost_high), tost_level
        row.decision = "equivalent"
        row.bound = _bound(row.metric, row.ratio_ci_low, row.ratio_ci_high)
        row.verdict = f"equivalent (within ±{margin:.0%}): {row.bound}"
        return
    row.decision = "inconclusive"
    row.reps_to_decide = reps_to_decide(row.n, fit.estimate, (low, high), (tost_low, tost_high), margin)
    row.bound = _bound(row.metric, row.ratio_ci_low, row.ratio_ci_high)
    wider = f"wider than ±{margin:.0%}" if margin > 0 else "includes 1"
    # "about N" is said where the simulation shows it holds (prediction_check.py: N
    # decides at least half the time); at the cap it would be a guess.
    if row.reps_to_decide and row.reps_to_decide < MAX_REPS_SUGGESTED:
        more = f"about {row.reps_to_decide} repetitions would decide it"
    elif row.reps_to_decide:
        more = f"more than {MAX_REPS_SUGGESTED:,} repetitions would be needed"
    else:
        more = "more repetitions needed"
    row.verdict = f"inconclusive: [{row.ratio_ci_low:.2f}-{row.ratio_ci_high:.2f}] is {wider}, {more}"


def _bound(metric: str, low: float, high: float) -> str:
    """What an interval allows, in the words of the metric's direction: "at most 4% slower,
    at most 3% faster" for [0.97, 1.04] of a time; "2% to 8% slower" for [1.02, 1.08] (an
    equivalent row's interval at 1 - 2 alpha can lie to one side of 1)."""
    worse, better = _direction(metric, 1.0), _direction(metric, -1.0)
    if low >= 1:
        return f"{_share(low - 1)} to {_share(high - 1)} {worse}"
    if high <= 1:
        return f"{_share(1 - high)} to {_share(1 - low)} {better}"
    return f"at most {_share(high - 1)} {worse}, at most {_share(1 - low)} {better}"


def _share(value: float) -> str:
    if not math.isfinite(value):
        return "any amount"
    return f"{value:.1%}" if value < 0.1 else f"{value:.0%}"


def reps_to_decide(
    n: int, estimate: float, test: tuple[float, float], tost: tuple[float, float], margin: float
) -> int | None:
    """Half-widths shrink as 1/sqrt(n): the n at which the test's interval would clear 1 or
    the two one-sided tests' interval fit in the margin, whichever comes first. None when
    unbounded."""
    aims = [(test, abs(estimate))]  # the test's interval clears 1
    if margin > 0:
        aims.append((tost, math.log1p(margin) - abs(estimate)))  # or the TOST interval fits
    needed = []
    for (low, high), room in aims:
        half = (high - low) / 2
        if not math.isfinite(half) or half <= 0:
            return None
        if room > 0:
            needed.append(math.ceil(n * (half / room) ** 2))
    if not needed:
        return MAX_REPS_SUGGESTED
    return min(MAX_REPS_SUGGESTED, max(n + 1, min(needed)))


def _pairs(
    runs: list[RunRecord], base_runs: list[RunRecord], metric: str
) -> tuple[list[float], list[float]] | None:
    """The two samples over the repetitions both have, in repetition order (a repetition
    one of them lacks, failed or added by an adaptive round for the other, pairs with
    nothing; of a repetition run twice, a disturbed run kept with its re-run, the later
    run counts); None when fewer than two are shared."""
    own = {r.rep: value for r in runs if (value := r.value(metric)) is not None}
    base = {r.rep: value for r in base_runs if (value := r.value(metric)) is not None}
    reps = sorted(own.keys() & base.keys())
    if len(reps) < 2:
        return None
    return [own[r] for r in reps], [base[r] for r in reps]


def summaries(
    runs: list[RunRecord],
    baseline: str,
    stacks: list[str],
    workloads: list[str],
    names: list[str] | None = None,
    *,
    design: Design | None = None,
    paired: bool | None = None,
) -> list[Summary]:
    """Every (stack, workload, metric) row of an experiment, each metric's comparisons
    corrected as one family."""
    design = design or Design()
    if paired is not None:
        design = Design(design.alpha, design.correction, design.equivalence, paired)
    groups = measured(runs)
    rows: list[Summary] = []
    chosen = names or list(metrics.compared())
    for metric in chosen:
        entries: list[Entry] = []
        for workload in workloads:
            registered = metrics.BY_NAME[metric]
            if (registered.reported or registered.optional) and not any(
                r.has(metric) for s in stacks for r in groups.get((s, workload), [])
            ):
                continue  # a metric this workload does not report, or this host lacks: no rows
            base_runs = groups.get((baseline, workload), [])
            base_values = known(base_runs, metric)
            for stack in stacks:
                own_runs = groups.get((stack, workload), [])
                values = known(own_runs, metric)
                if stack == baseline:
                    row = describe(stack, workload, metric, values)
                    if row.n:
                        row.ratio, row.decision, row.verdict = 1.0, "baseline", "baseline"
                    rows.append(row)
                    continue
                pairs = _pairs(own_runs, base_runs, metric) if design.paired else None
                if pairs is not None:
                    entries.append(Entry(stack, workload, values, base_values, *pairs))
                else:
                    entries.append(Entry(stack, workload, values, base_values))
        rows += compare_family(entries, metric, design)
    for row in rows:  # the baseline's too, and a row too short to compare: the design they were read under
        row.alpha, row.correction, row.equivalence = design.alpha, design.correction, design.equivalence
    # In the order the reports read them: workload, then stack, then metric.
    return sorted(
        rows, key=lambda r: (workloads.index(r.workload), stacks.index(r.stack), chosen.index(r.metric))
    )


@dataclass(frozen=True)
class Entry:
    """One comparison of a family: a stack's values against the reference's; paired_values
    and paired_reference, when given, are the two in repetition order over the repetitions
    both have."""

    stack: str
    workload: str
    values: list[float]
    reference: list[float]
    paired_values: list[float] | None = None
    paired_reference: list[float] | None = None


def compare_family(entries: list[Entry], metric: str, design: Design) -> list[Summary]:
    """The rows of one family of comparisons, corrected together (see family.py): paired
    where an entry has its pairs, unpaired otherwise."""
    rows: list[Summary] = []
    pending: list[tuple[Summary, methods.Fit]] = []
    strictest = design.alpha / max(1, len(entries)) if design.correction != "none" else design.alpha
    for entry in entries:
        row = describe(entry.stack, entry.workload, metric, entry.values)
        rows.append(row)
        if entry.values and entry.reference and (reference_median := intervals.median(entry.reference)):
            row.median_ratio = intervals.median(entry.values) / reference_median
        row.paired = entry.paired_values is not None
        a, b = (
            (entry.paired_values, entry.paired_reference) if row.paired else (entry.values, entry.reference)
        )
        if b:
            row.reference_median = intervals.median(b)
        fit = methods.fit(
            np.asarray(a, float), np.asarray(b, float), paired=row.paired, strictest_alpha=strictest
        )
        if fit is None:
            row.decision = row.verdict = (
                "insufficient data" if min(len(a or []), len(b or [])) < 2 else "no ratio"
            )
            continue
        pending.append((row, fit))
    levels = family.adjust([fit.p_value for _, fit in pending], design.alpha, design.correction)
    for (row, fit), level in zip(pending, levels, strict=True):
        decide(row, fit, level.alpha, level.p_adjusted, design)
    return rows


def compare_samples(
    entries: list[tuple[str, str, list[float], list[float]]], metric: str, design: Design | None = None
) -> list[Summary]:
    """Unpaired comparisons of (stack, workload, values, reference values), one family:
    two experiments side by side (values B against reference A)."""
    design = design or Design()
    unpaired = Design(design.alpha, design.correction, design.equivalence, False)
    return compare_family([Entry(*entry) for entry in entries], metric, unpaired)


def warnings_for(rows: list[Summary], runs: list[RunRecord], baseline: str) -> list[str]:
    found = []
    for row in rows:
        if row.metric == HEADLINE_METRIC and row.cv is not None and row.cv > NOISY_CV:
            found.append(
                f"{row.stack}/{row.workload}: wall time varies by {row.cv:.1%} (CV > "
                f"{NOISY_CV:.0%}); more repetitions or a quieter machine would help"
            )
    failed = [r for r in runs if r.status == "failed"]
    if failed:
        found.append(f"{len(failed)} run(s) failed; see the failed runs below")
    return found


def design_note(rows: list[Summary]) -> str | None:
    """One line saying how the verdicts were reached, for every report."""
    compared = [r for r in rows if r.metric == HEADLINE_METRIC and r.method]
    if not compared:
        return None
    used = sorted({r.method for r in compared if r.method})
    families = len(compared)
    correction = {"holm": "Holm", "bh": "Benjamini-Hochberg", "none": "no"}[compared[0].correction]
    assumption = (
        " (t methods assume the log times are roughly normal; they decide where a rank test cannot "
        "with so few repetitions)"
        if any(m.endswith("-t") for m in used)
        else ""
    )
    return (
        f"Verdicts: {', '.join(used)} on log ratios{assumption}; {families} elapsed-time comparisons, "
        f"{correction} correction, alpha {compared[0].alpha:g} per family; each interval is drawn at the "
        f"level its verdict was decided at; equivalent means the two one-sided tests' interval (its "
        f"level 1 - 2 alpha) lies within ±{compared[0].equivalence:.0%}."
    )
