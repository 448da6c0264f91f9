"""What one layer adds: each incremental step against the stack one layer shorter."""

import numpy as np

from layerbench.core.runs import RunRecord
from layerbench.plan.expansion import Increment
from layerbench.stats import Design, Entry, compare_family
from layerbench.stats.marginal import marginals

INCREMENTS = {
    "image": Increment("dir", "image"),
    "image+overlay": Increment("image", "overlay"),
    "box": Increment("image+overlay", "fuse"),
}


def runs(stack: str, values: list[float]) -> list[RunRecord]:
    return [RunRecord(rep, stack, "w", "ok", rep=rep, values={"wall_s": v}) for rep, v in enumerate(values)]


def experiment(noise: float = 0.01, seed: int = 1) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    base = rng.uniform(1.0, 1.2, 8)  # a repetition's shared drift, as interleaved rounds have
    jitter = lambda: 1 + rng.normal(0, noise, 8)  # noqa: E731
    return (
        runs("dir", list(base * jitter()))
        + runs("image", list(base * 1.5 * jitter()))
        + runs("image+overlay", list(base * 1.5 * jitter()))  # the overlay adds nothing
        + runs("box", list(base * 3.0 * jitter()))  # fuse doubles what is below it
    )


def test_each_step_is_its_stack_against_the_one_below() -> None:
    found = marginals(experiment(), INCREMENTS, ["w"], Design(paired=True))
    walls = [m for m in found if m.row.metric == "wall_s"]
    assert [(m.stack, m.previous, m.layer) for m in walls] == [
        ("image", "dir", "image"),
        ("image+overlay", "image", "overlay"),
        ("box", "image+overlay", "fuse"),
    ]
    image, overlay, fuse = (m.row for m in walls)
    assert image.decision == "slower" and 1.4 < image.ratio < 1.6
    assert overlay.decision in ("equivalent", "inconclusive") and 0.95 < overlay.ratio < 1.05
    assert fuse.decision == "slower" and 1.9 < fuse.ratio < 2.1  # against its own previous, not x3
    assert all(
        row.paired and row.ratio_ci_low < row.ratio < row.ratio_ci_high for row in (image, overlay, fuse)
    )
    assert walls[2].as_dict() == fuse.as_dict() | {"previous": "image+overlay", "layer": "fuse"}  # JSON row


def test_the_steps_are_one_family_of_their_own() -> None:
    data = experiment(noise=0.05, seed=7)
    found = [
        m.row for m in marginals(data, INCREMENTS, ["w"], Design(paired=True)) if m.row.metric == "wall_s"
    ]
    by_stack: dict[str, list[float]] = {}
    for run in data:
        by_stack.setdefault(run.stack, []).append(run.wall_s)
    pairs = [("image", "dir"), ("image+overlay", "image"), ("box", "image+overlay")]
    alone = compare_family(
        [Entry(s, "w", by_stack[s], by_stack[p], by_stack[s], by_stack[p]) for s, p in pairs],
        "wall_s",
        Design(paired=True),
    )
    assert [r.p_adjusted for r in found] == [r.p_adjusted for r in alone]  # three, corrected together
    assert [r.ratio_ci_level for r in found] == [r.ratio_ci_level for r in alone]


def test_no_increments_no_rows_and_a_missing_metric_gives_none() -> None:
    assert marginals(experiment(), {}, ["w"], Design()) == []
    found = marginals(experiment(), INCREMENTS, ["w"], Design())
    assert {m.row.metric for m in found} == {"wall_s"}  # these runs report no throughput
    assert not any(m.row.paired for m in found)  # sequential: unpaired
