"""Validity checks: does layerbench find a real difference, invent none, and see a small one?

- known effect: 512 MiB written with O_DIRECT and fsync onto ext4 in an image (on a tmpfs,
  so the disk's own noise stays out) whose loop device is throttled to 100 MB/s; the
  measured throughput must be within 3 % of 100 MB/s and the verdict against the same
  stack unthrottled "slower".
- A/A: two identical stacks. The rate of "no significant difference" is checked on
  simulated samples (it must be at least 95 %); one real experiment checks the plumbing.
- sensitivity: a 10 % difference with the default repetitions: one real experiment
  (throttled to 90 instead of 100 MB/s) and its detection rate on simulated samples.

`layerbench selftest` runs these and prints each check with its figure and PASS/FAIL.
"""

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from layerbench import namespace, stats
from layerbench.experiment import Experiment
from layerbench.plan import parse_plan
from layerbench.reports import base as reports
from layerbench.scratch import Scratch
from layerbench.store import Store

DEFAULT_REPS = 5  # the plan's default; the checks use what a user gets
THROTTLE_BPS = 100_000_000
KNOWN_TOLERANCE = 0.03
AA_MIN_RATE = 0.95
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
[stacks.a]
layers = [{{ kind = "tmpfs", size = "256M" }}]
[stacks.b]
layers = [{{ kind = "tmpfs", size = "256M" }}]
[workloads.files]
kind = "metadata"
files = 2000
size = "4K"
"""


@dataclass
class Check:
    name: str
    figure: str
    passed: bool

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {self.figure}"


# ---- on simulated samples ---------------------------------------------------------------


def simulated_rate(shift: float, cv: float, reps: int, experiments: int, seed: int = 1) -> float:
    """Fraction of simulated experiments whose verdict is "slower" (shift > 0) or "no
    significant difference" (shift == 0); wall times are log-normal with the given CV."""
    rng = np.random.default_rng(seed)
    sigma = float(np.sqrt(np.log(1 + cv**2)))
    wanted = "slower" if shift > 0 else "no significant difference"
    hits = 0
    for _ in range(experiments):
        base = rng.lognormal(0.0, sigma, reps)
        other = rng.lognormal(float(np.log1p(shift)), sigma, reps)
        ratio = float(np.median(other) / np.median(base))
        hits += stats.verdict("wall_s", ratio, stats.mann_whitney_p(other, base)) == wanted
    return hits / experiments


def aa_simulated(experiments: int) -> Check:
    rate = simulated_rate(0.0, 0.05, DEFAULT_REPS, experiments)
    return Check(
        "A/A rate (simulated)",
        f"{rate:.1%} of {experiments} experiments ({DEFAULT_REPS} vs {DEFAULT_REPS} runs, CV 5 %) "
        f'say "no significant difference" (need >= {AA_MIN_RATE:.0%})',
        rate >= AA_MIN_RATE,
    )


def sensitivity_simulated(experiments: int) -> Check:
    power = simulated_rate(SENSITIVITY_SHIFT, SENSITIVITY_CV, DEFAULT_REPS, experiments)
    return Check(
        "sensitivity (simulated)",
        f"a {SENSITIVITY_SHIFT:.0%} slower stack is found slower in {power:.1%} of {experiments} "
        f"experiments ({DEFAULT_REPS} vs {DEFAULT_REPS} runs, CV {SENSITIVITY_CV:.0%}; "
        f"need >= {SENSITIVITY_MIN_POWER:.0%})",
        power >= SENSITIVITY_MIN_POWER,
    )


# ---- on real runs -----------------------------------------------------------------------


def run_plan(text: str, scratch: Scratch, store: Store) -> reports.ReportData:
    """One experiment, start to end, as `layerbench run` does it (without the report)."""
    experiment = Experiment(parse_plan(text, "builtin:selftest"), store, scratch)
    experiment.prepare([])
    experiment.run()
    assert experiment.id is not None
    return reports.gather(store, experiment.id)


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
            f"throttled vs unthrottled wall time x{wall.ratio:.2f} "
            f"[{wall.ratio_ci_low:.2f}-{wall.ratio_ci_high:.2f}], p = {wall.p_value:.3f}: {wall.verdict}",
            wall.verdict == "slower",
        )
    )
    # The 10 % step: the 90 MB/s stack against the 100 MB/s one.
    groups = stats.measured(data.runs)
    slow = [r["wall_s"] for r in groups.get(("throttled-90", "write"), [])]
    fast = [r["wall_s"] for r in groups.get(("throttled-100", "write"), [])]
    step = stats.summarize("throttled-90", "write", "wall_s", slow, fast)
    figure = (
        f"90 vs 100 MB/s: x{step.ratio:.3f} [{step.ratio_ci_low:.3f}-{step.ratio_ci_high:.3f}], "
        f"p = {step.p_value:.3f}, {step.n} vs {len(fast)} runs: {step.verdict}"
        if step.ratio is not None and step.p_value is not None
        else f"too few runs ({len(slow)} vs {len(fast)})"
    )
    checks.append(Check("sensitivity (real, 10 % injected)", figure, step.verdict == "slower"))
    return checks


def aa_real_check(data: reports.ReportData) -> Check:
    wall = data.summary("b", "files", "wall_s")
    if wall is None or wall.ratio is None or wall.p_value is None:
        return Check("A/A plumbing (real)", "no successful runs", False)
    return Check(
        "A/A plumbing (real)",
        f"two identical tmpfs stacks, metadata: x{wall.ratio:.3f} "
        f"[{wall.ratio_ci_low:.3f}-{wall.ratio_ci_high:.3f}], p = {wall.p_value:.3f}, "
        f"{wall.n} runs each: {wall.verdict}",
        wall.verdict == "no significant difference",
    )


@contextlib.contextmanager
def _store(db: Path | None) -> Iterator[Store]:
    if db is not None:
        store = Store(db)
        try:
            yield store
        finally:
            store.close()
        return
    with tempfile.TemporaryDirectory(prefix="layerbench-selftest-") as directory:
        store = Store(Path(directory) / "selftest.db")
        try:
            yield store
        finally:
            store.close()


def selftest(
    scratch_root: Path,
    db: Path | None,
    *,
    report: Callable[[Check], None],
    size: str = "512M",
    simulations: int = 400,
) -> list[Check]:
    """Run every check, handing each to report as it is decided."""
    checks: list[Check] = []

    def decided(check: Check) -> None:
        checks.append(check)
        report(check)

    decided(aa_simulated(simulations))
    decided(sensitivity_simulated(simulations))
    namespace.enter_private_mount_namespace()
    scratch = Scratch(scratch_root)
    scratch.lock("layerbench selftest")
    try:
        scratch.clean()
        with _store(db) as store:
            decided(aa_real_check(run_plan(aa_plan(), scratch, store)))
            for check in known_effect_checks(run_plan(known_effect_plan(size), scratch, store)):
                decided(check)
    finally:
        scratch.tidy()
        scratch.unlock()
    return checks
