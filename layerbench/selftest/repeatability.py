"""Do answers repeat? Two real checks of `selftest`:

- settle A/A: the same timed run right after a teardown that deleted a large file, and
  after an idle start, interleaved in random order; the first must not be slower (the
  settle wait before each timed run is what makes it so, see observe/settle.py).
- `selftest --repro`: one small plan twice, back to back, then compare: how many relative
  costs agree, and whether the sentinel moved."""

import random
import time
from collections.abc import Callable
from pathlib import Path

from layerbench.analysis import drift
from layerbench.analysis.compare import compare, load_side
from layerbench.core.runs import RunRecord
from layerbench.executors.base import Setting
from layerbench.experiment import Experiment
from layerbench.observe import settle
from layerbench.plan import parse_plan
from layerbench.plan.schedule import Trial
from layerbench.reports import base as report_data
from layerbench.selftest.check import Check
from layerbench.session import Session
from layerbench.store import Location

AGREEMENT = 0.90  # selftest --repro fails below this share of agreeing relative costs
SETTLE_ROUNDS = 10
# A false "slower" here has a 0.5 % chance (one-sided at 0.01): a failed check means runs
# leak into each other, not bad luck.
SETTLE_ALPHA = 0.01
DELETED = "1G"  # what the teardown before an "after deletion" run removes


def settle_plan(deleted: str = DELETED) -> str:
    return f"""
name = "selftest-settle"
reps = {SETTLE_ROUNDS}
warmup = 0
baseline = "after-idle"
alpha = {SETTLE_ALPHA}
[stacks.after-idle]
layers = []
[stacks.after-deletion]
layers = []
[workloads.big]
kind = "stream-write"
size = "{deleted}"
fsync = true
[workloads.probe]
kind = "stream-write"
size = "64M"
fsync = true
"""


def settle_check(session: Session, *, deleted: str = DELETED, seed: int = 1) -> Check:
    """Each round runs, in random order: a `big` trial (its teardown deletes `deleted`) and
    straight after it the probe on stack after-deletion; a pause as long as that big trial
    and then the probe on stack after-idle. Both probes settle first, as every trial does."""
    plan = parse_plan(settle_plan(deleted), "builtin:selftest-settle")
    store = session.store
    assert store is not None
    experiment = Experiment(plan, store, session.executor, seed=seed)
    experiment.prepare([])
    assert experiment.id is not None
    setting = Setting(plan, experiment.workloads, experiment.id)
    rng = random.Random(seed)
    index = 0
    pause = 1.0

    def trial(stack: str, workload: str, rep: int) -> None:
        nonlocal index
        experiment.run_trial(Trial(index, stack, workload, rep, workload == "big"), setting)
        index += 1

    for rep in range(SETTLE_ROUNDS):
        for condition in rng.sample(["after-deletion", "after-idle"], 2):
            if condition == "after-deletion":
                began = time.monotonic()
                trial("after-deletion", "big", rep)
                pause = time.monotonic() - began
            else:
                time.sleep(pause)
            trial(condition, "probe", rep)
    store.finish_experiment(experiment.id, "done")
    data = report_data.gather(store, experiment.id)
    row = data.summary("after-deletion", "probe", "wall_s")
    waits = _median_waits(data.runs)
    if row is None or row.ratio is None:
        return Check("settle A/A (real)", "no successful probe runs", False)
    return Check(
        "settle A/A (real)",
        f"64M fsync'd write after a teardown that deleted {deleted} vs after an idle start: "
        f"{report_data.fmt_ratio(row)}, p = {report_data.fmt_p(row)} ({row.method}), {row.n} rounds: "
        f"{row.verdict}; settle waited {waits}",
        row.decision != "slower",
    )


def _median_waits(runs: list[RunRecord]) -> str:
    said = []
    for stack in ("after-deletion", "after-idle"):
        waits = [
            wait
            for r in runs
            if r.stack == stack and r.workload == "probe" and (wait := r.fact(settle.WAITED_S)) is not None
        ]
        if waits:
            said.append(f"{stack} median {sorted(waits)[len(waits) // 2]:.2f} s, longest {max(waits):.2f} s")
    return "; ".join(said) or "nothing (settle = 0)"


def repro_plan() -> str:
    return """
name = "selftest-repro"
reps = 6
warmup = 1
baseline = "disk"
[stacks.disk]
layers = []
[stacks.tmpfs]
layers = [{ kind = "tmpfs", size = "512M" }]
[stacks.image]
layers = [{ kind = "image", fs = "ext4", size = "512M" }]
[workloads.write]
kind = "stream-write"
size = "128M"
fsync = true
[workloads.files]
kind = "metadata"
files = 1000
size = "4K"
"""


def repro_checks(session: Session) -> list[Check]:
    """The plan twice, then compare B against A."""
    assert session.store is not None and session.db is not None
    ids = []
    for _ in range(2):
        experiment = Experiment(
            parse_plan(repro_plan(), "builtin:selftest-repro"), session.store, session.executor
        )
        experiment.prepare([])
        ids.append(experiment.run())
    comparison = compare(load_side(session.db, ids[0]), load_side(session.db, ids[1]))
    agree, compared = comparison.agreeing()
    moved = drift.moved(comparison.drift.sentinel_moves)
    sentinel = (
        "sentinel moved: " + ", ".join(m.phrase() for m in moved)
        if moved
        else "sentinel steady: " + ", ".join(m.phrase() for m in comparison.drift.sentinel_moves)
        if comparison.drift.sentinel_compared
        else "no sentinel to compare"
    )
    baseline = ", ".join(
        f"x{r.ratio:.2f} on {r.workload}"
        for r in comparison.rows
        if r.stack == comparison.b.baseline and r.ratio
    )
    share = agree / compared if compared else 0.0
    absolute_agree = sum(not r.significant for r in comparison.rows)
    return [
        Check(
            "repro: relative costs",
            f"experiments {ids[0]} and {ids[1]}: {comparison.agreement()} ({share:.0%}; need "
            f"{AGREEMENT:.0%} unless the sentinel moved); absolute: {absolute_agree} of "
            f"{len(comparison.rows)} agree; baseline B/A {baseline}",
            share >= AGREEMENT or bool(moved),
        ),
        Check(
            "repro: drift sentinel",
            sentinel + (f"; {comparison.drift.line()}" if comparison.drift.line() else ""),
            True,
        ),
    ]


def selftest_repro(
    scratch_root: Path, db: Location | None, *, report: Callable[[Check], None]
) -> list[Check]:
    """`selftest --repro`: the repro checks, each handed to report as it is decided."""
    # Without --db the experiments go to a store that is removed with the session.
    with Session(scratch_root, "layerbench selftest --repro", db=db) as session:
        checks = repro_checks(session)
    for check in checks:
        report(check)
    return checks
