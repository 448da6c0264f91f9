"""Validity checks: does layerbench find a real difference, invent none, and see a small one?

- known effect: 512 MiB written with O_DIRECT and fsync onto ext4 in an image (on a tmpfs,
  so the disk's own noise stays out) whose loop device is throttled to 100 MB/s; the
  measured throughput must be within 3 % of 100 MB/s and the verdict against the same
  stack unthrottled "slower".
- calibration, on simulated experiments shaped like the default one (3 stacks x 3
  workloads against a baseline, log-normal wall times, with drift shared within a
  repetition or independent noise; paired and unpaired; 5, 8 and 10 repetitions): the
  family-wise false-alarm rate of A/A experiments (at most alpha plus its Monte-Carlo
  error), the coverage of the ratio and median intervals (at least their stated level),
  the power against 4 % and 10 % shifts, and the false-alarm rate of reps = "auto"'s
  stopping rule; one real A/A experiment checks the plumbing.
- sensitivity: a 10 % difference with the default repetitions: one real experiment
  (throttled to 90 instead of 100 MB/s) and its detection rate on simulated samples.

`layerbench selftest` runs these and prints each check with its figure and PASS/FAIL.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from layerbench import stats
from layerbench.core.sizes import format_size, parse_size
from layerbench.reports import base as reports
from layerbench.selftest import prediction_check, repeatability, sequential_check
from layerbench.selftest.check import Check
from layerbench.session import Session
from layerbench.store import Location

DEFAULT_REPS = 5  # the plan's default; the checks use what a user gets
THROTTLE_BPS = 100_000_000
KNOWN_TOLERANCE = 0.03
AA_PLUMBING_ALPHA = 0.001
SENSITIVITY_SHIFT = 0.10
SENSITIVITY_CV = 0.03  # run-to-run noise of a quiet machine (wall-time CV)
SENSITIVITY_MIN_POWER = 0.90

_SLOWER_BPS = int(THROTTLE_BPS * (1 - SENSITIVITY_SHIFT))
_IMAGE_ON_TMPFS = '{ kind = "tmpfs", size = "1G" }, { kind = "image", fs = "ext4", size = "800M" }'


def known_effect_plan(size: str = "512M", reps: int = DEFAULT_REPS) -> str:
    """Unthrottled, throttled to 100 MB/s, and to 90 MB/s (the 10 % for sensitivity)."""
    return f"""
name = "selftest-known-effect"
reps = {reps}
warmup = 1
baseline = "image"
[stacks.image]
layers = [{_IMAGE_ON_TMPFS}]
[stacks.throttled-100]
layers = [{_IMAGE_ON_TMPFS}, {{ kind = "throttle", write_bps = {THROTTLE_BPS} }}]
[stacks.throttled-90]
layers = [{_IMAGE_ON_TMPFS}, {{ kind = "throttle", write_bps = {_SLOWER_BPS} }}]
[workloads.write]
kind = "stream-write"
size = "{size}"
block_size = "4M"
direct = true
fsync = true
"""


def aa_plan(reps: int = DEFAULT_REPS) -> str:
    return f"""
name = "selftest-a-a"
reps = {reps}
warmup = 1
baseline = "a"
# The plumbing is checked at a level of its own: a false alarm here has a 0.1 % chance, so
# a failed check means a broken harness, not bad luck (the simulation measures the rates).
alpha = {AA_PLUMBING_ALPHA}
[stacks.a]
layers = [{{ kind = "tmpfs", size = "256M" }}]
[stacks.b]
layers = [{{ kind = "tmpfs", size = "256M" }}]
[workloads.files]
kind = "metadata"
files = 2000
size = "4K"
"""


# ---- on simulated samples ---------------------------------------------------------------

# The default experiment's family: 3 stacks x 3 workloads, each against the baseline.
FAMILY_STACKS = 3
FAMILY_WORKLOADS = 3
COMPARISONS = FAMILY_STACKS * FAMILY_WORKLOADS
CALIBRATION_EXPERIMENTS = 2000
CALIBRATION_REPS = (5, 8, 10)
SHIFTS = (0.04, 0.10)


@dataclass(frozen=True)
class Noise:
    """Log-scale noise of simulated wall times: drift shared by every stack within one
    repetition (a machine that is slower for a while), and each run's own noise."""

    name: str
    shared_sd: float
    own_sd: float


DRIFT = Noise("shared drift 5 %, own noise 1 %", 0.05, 0.01)
INDEPENDENT = Noise("independent noise 5 %", 0.0, 0.05)


@dataclass
class Tally:
    """Counts over simulated experiments, with their Monte-Carlo errors."""

    experiments: int = 0
    false_alarms: int = 0  # experiments with at least one significant A/A comparison
    found: int = 0  # experiments whose shifted comparison was found slower
    covered: int = 0  # ratio intervals that hold the true ratio
    intervals: int = 0
    level_sum: float = 0.0
    median_covered: int = 0
    medians: int = 0
    median_level_sum: float = 0.0

    @staticmethod
    def rate(hits: int, total: int) -> tuple[float, float]:
        share = hits / total if total else 0.0
        return share, math.sqrt(share * (1 - share) / total) if total else 0.0


def simulate_family(
    rng: np.random.Generator,
    reps: int,
    noise: Noise,
    *,
    paired: bool,
    shift: float = 0.0,
    design: stats.Design | None = None,
) -> tuple[list[stats.Summary], list[stats.Summary]]:
    """One simulated experiment's family of elapsed-time comparisons (the first stack of
    the first workload shifted by shift), and the medians of every stack."""
    design = design or stats.Design(paired=paired)
    design = stats.Design(design.alpha, design.correction, design.equivalence, paired)
    entries, medians = [], []
    for w in range(FAMILY_WORKLOADS):
        drift = rng.normal(0.0, noise.shared_sd, reps) if noise.shared_sd else np.zeros(reps)
        base = np.exp(drift + rng.normal(0.0, noise.own_sd, reps))
        for s in range(FAMILY_STACKS):
            effect = math.log1p(shift) if (s, w) == (0, 0) else 0.0
            values = np.exp(drift + effect + rng.normal(0.0, noise.own_sd, reps))
            pairs = (list(values), list(base)) if paired else (None, None)
            entries.append(stats.Entry(f"s{s}", f"w{w}", list(values), list(base), *pairs))
            medians.append(stats.describe(f"s{s}", f"w{w}", "wall_s", list(values)))
    return stats.compare_family(entries, "wall_s", design), medians


def calibrate(
    reps: int, noise: Noise, *, paired: bool, shift: float, experiments: int, seed: int = 1
) -> Tally:
    rng = np.random.default_rng(seed)
    tally = Tally()
    for _ in range(experiments):
        rows, medians = simulate_family(rng, reps, noise, paired=paired, shift=shift)
        tally.experiments += 1
        shifted = rows[0]
        others = rows[1:] if shift else rows
        tally.false_alarms += any(r.significant for r in others)
        tally.found += shifted.decision == "slower"
        for row in rows:
            truth = 1 + shift if row is shifted else 1.0
            if row.ratio_ci_low is not None and row.ratio_ci_high is not None and row.ratio_ci_level:
                tally.intervals += 1
                tally.covered += row.ratio_ci_low <= truth <= row.ratio_ci_high
                tally.level_sum += row.ratio_ci_level
        for index, row in enumerate(medians):
            truth = 1 + shift if index == 0 else 1.0
            if row.ci_low is not None and row.ci_high is not None and row.ci_level:
                tally.medians += 1
                tally.median_covered += row.ci_low <= truth <= row.ci_high
                tally.median_level_sum += row.ci_level
    return tally


def adaptive_false_alarms(
    noise: Noise, *, first: int = 5, most: int = 20, experiments: int = 500, seed: int = 2
) -> tuple[float, float]:
    """The family-wise false-alarm rate of reps = "auto"'s rule on A/A: look after every
    round from `first` repetitions on, stop each comparison once decided."""
    rng = np.random.default_rng(seed)
    alarms = 0
    for _ in range(experiments):
        drift = rng.normal(0.0, noise.shared_sd, (FAMILY_WORKLOADS, most))
        base = np.exp(drift + rng.normal(0.0, noise.own_sd, (FAMILY_WORKLOADS, most)))
        values = np.exp(
            drift[:, None, :] + rng.normal(0.0, noise.own_sd, (FAMILY_WORKLOADS, FAMILY_STACKS, most))
        )
        used = np.full((FAMILY_WORKLOADS, FAMILY_STACKS), first)
        while True:
            entries = [
                stats.Entry(
                    f"s{s}",
                    f"w{w}",
                    list(values[w, s, : used[w, s]]),
                    list(base[w, : used[w, s]]),
                    list(values[w, s, : used[w, s]]),
                    list(base[w, : used[w, s]]),
                )
                for w in range(FAMILY_WORKLOADS)
                for s in range(FAMILY_STACKS)
            ]
            rows = stats.compare_family(entries, "wall_s", stats.Design(paired=True))
            open_rows = [
                (w, s)
                for (w, s), row in zip(np.ndindex(FAMILY_WORKLOADS, FAMILY_STACKS), rows, strict=True)
                if row.decision not in (*stats.SIGNIFICANT, "equivalent") and used[w, s] < most
            ]
            if not open_rows:
                alarms += any(row.significant for row in rows)
                break
            for w, s in open_rows:
                used[w, s] += 1
    return Tally.rate(alarms, experiments)


def calibration_checks(
    experiments: int = CALIBRATION_EXPERIMENTS, reps: tuple[int, ...] = CALIBRATION_REPS
) -> list[Check]:
    """The simulation study: family-wise false alarms, power, and interval coverage."""
    checks = []
    alpha = stats.ALPHA
    designs = ((DRIFT, True), (INDEPENDENT, True), (INDEPENDENT, False))
    for n in reps:
        for noise, paired in designs:
            how = f"{'paired' if paired else 'unpaired'}, {noise.name}, n = {n}"
            aa = calibrate(n, noise, paired=paired, shift=0.0, experiments=experiments, seed=n)
            rate, error = Tally.rate(aa.false_alarms, aa.experiments)
            checks.append(
                Check(
                    f"A/A false alarms (simulated, {how})",
                    f"{rate:.2%} ± {error:.2%} of {aa.experiments} experiments of {COMPARISONS} "
                    f"comparisons had a significant one (need <= {alpha:.0%} + 3 MC errors)",
                    rate <= alpha + 3 * error,
                )
            )
            checks.append(
                _coverage(
                    f"ratio interval coverage (simulated, {how})",
                    "true ratio",
                    aa.covered,
                    aa.intervals,
                    aa.level_sum,
                )
            )
            checks.append(
                _coverage(
                    f"median interval coverage (simulated, {how})",
                    "true median",
                    aa.median_covered,
                    aa.medians,
                    aa.median_level_sum,
                )
            )
            for shift in SHIFTS:
                ab = calibrate(n, noise, paired=paired, shift=shift, experiments=experiments, seed=100 + n)
                power, error = Tally.rate(ab.found, ab.experiments)
                checks.append(
                    Check(
                        f"power (simulated, {how}, {shift:.0%} slower)",
                        f"found slower in {power:.1%} ± {error:.1%} of {ab.experiments} experiments "
                        "(information: what this design can see)",
                        True,
                    )
                )
    return checks + stopping_rule_checks(experiments)


def stopping_rule_checks(experiments: int) -> list[Check]:
    """The rules that add rounds after looking: a budget's (its own study) and reps = "auto"."""
    # Each simulated sequential experiment runs up to 6 looks through the real code: 300 of
    # each kind (about 25 s here) give a Monte-Carlo error near 1.3 % on a 5 % rate.
    checks = sequential_check.checks(min(300, max(50, experiments // 2)))
    rate, error = adaptive_false_alarms(DRIFT)
    checks.append(
        Check(
            'reps = "auto" stopping rule (simulated, paired, shared drift, 5 to 20 repetitions)',
            f"{rate:.2%} ± {error:.2%} of experiments had a false alarm after looking every round "
            "(information: the cost of stopping early)",
            True,
        )
    )
    return checks + prediction_check.checks()


def _coverage(name: str, truth: str, covered: int, intervals: int, level_sum: float) -> Check:
    """Intervals must hold the truth at least as often as their stated level says."""
    share, error = Tally.rate(covered, intervals)
    level = level_sum / intervals if intervals else 0.0
    return Check(
        name,
        f"{share:.2%} ± {error:.2%} of {intervals} intervals hold the {truth}; their stated level "
        f"averages {level:.2%} (need coverage >= level - 3 MC errors)",
        share >= level - 3 * error,
    )


def sensitivity_simulated(experiments: int) -> Check:
    """A single 10 % comparison with the default repetitions on a quiet machine."""
    rng = np.random.default_rng(7)
    sigma = float(np.sqrt(np.log(1 + SENSITIVITY_CV**2)))
    found = 0
    for _ in range(experiments):
        base = rng.lognormal(0.0, sigma, DEFAULT_REPS)
        other = rng.lognormal(float(np.log1p(SENSITIVITY_SHIFT)), sigma, DEFAULT_REPS)
        (row,) = stats.compare_family(
            [stats.Entry("b", "w", list(other), list(base), list(other), list(base))],
            "wall_s",
            stats.Design(paired=True),
        )
        found += row.decision == "slower"
    power = found / experiments
    return Check(
        "sensitivity (simulated)",
        f"a {SENSITIVITY_SHIFT:.0%} slower stack, alone against the baseline, is found slower in "
        f"{power:.1%} of {experiments} experiments ({DEFAULT_REPS} paired runs, CV {SENSITIVITY_CV:.0%}; "
        f"need >= {SENSITIVITY_MIN_POWER:.0%})",
        power >= SENSITIVITY_MIN_POWER,
    )


# ---- on real runs -----------------------------------------------------------------------


def known_effect_checks(data: reports.ReportData) -> list[Check]:
    throttled = data.summary("throttled-100", "write", "throughput")
    wall = data.summary("throttled-100", "write", "wall_s")
    checks = []
    if throttled is None or throttled.median is None or wall is None:
        return [Check("known effect", "no successful throttled runs", False)]
    error = throttled.median / THROTTLE_BPS - 1
    checks.append(
        Check(
            "known effect: throughput",
            f"throttled to {THROTTLE_BPS / 1e6:.0f} MB/s, measured {throttled.median / 1e6:.1f} MB/s "
            f"({error:+.1%}; need within +-{KNOWN_TOLERANCE:.0%}), n = {throttled.n}",
            abs(error) <= KNOWN_TOLERANCE,
        )
    )
    checks.append(
        Check(
            "known effect: verdict",
            f"throttled vs unthrottled wall time {reports.fmt_ratio(wall)}, "
            f"p = {reports.fmt_p(wall)} ({wall.method}): {wall.verdict}",
            wall.decision == "slower",
        )
    )
    # The 10 % step: the 90 MB/s stack against the 100 MB/s one, a family of its own.
    groups = stats.measured(data.runs)
    slow = [r.wall_s for r in groups.get(("throttled-90", "write"), [])]
    fast = [r.wall_s for r in groups.get(("throttled-100", "write"), [])]
    (step,) = stats.compare_samples([("throttled-90", "write", slow, fast)], "wall_s")
    figure = (
        f"90 vs 100 MB/s: {reports.fmt_ratio(step)}, p = {reports.fmt_p(step)} ({step.method}), "
        f"{step.n} vs {len(fast)} runs: {step.verdict}"
        if step.ratio is not None
        else f"too few runs ({len(slow)} vs {len(fast)})"
    )
    checks.append(Check("sensitivity (real, 10 % injected)", figure, step.decision == "slower"))
    return checks


def aa_real_check(data: reports.ReportData) -> Check:
    wall = data.summary("b", "files", "wall_s")
    if wall is None or wall.ratio is None or wall.p_value is None:
        return Check("A/A plumbing (real)", "no successful runs", False)
    return Check(
        "A/A plumbing (real)",
        f"two identical tmpfs stacks, metadata: {reports.fmt_ratio(wall)}, p = {reports.fmt_p(wall)} "
        f"({wall.method}, alpha {AA_PLUMBING_ALPHA:g}), {wall.n} runs each: {wall.verdict}",
        not wall.significant,
    )


def selftest(
    scratch_root: Path,
    db: Location | None,
    *,
    report: Callable[[Check], None],
    size: str = "512M",
    simulations: int = CALIBRATION_EXPERIMENTS,
) -> list[Check]:
    """Run every check, handing each to report as it is decided."""
    checks: list[Check] = []

    def decided(check: Check) -> None:
        checks.append(check)
        report(check)

    for check in calibration_checks(simulations):
        decided(check)
    decided(sensitivity_simulated(400))
    # Without --db the experiments go to a store that is removed with the session.
    with Session(scratch_root, "layerbench selftest", db=db) as session:
        decided(aa_real_check(session.run_plan(aa_plan())))
        # The deletion before each probe scales with --size: 1G at the default 512M.
        decided(repeatability.settle_check(session, deleted=format_size(2 * parse_size(size))))
        for check in known_effect_checks(session.run_plan(known_effect_plan(size))):
            decided(check)
    return checks
