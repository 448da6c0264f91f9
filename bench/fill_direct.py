#!/usr/bin/env python3
"""The stream-write fill written with O_DIRECT against one written through the page cache,
per stack: the ratio (direct / page cache) of the untimed preparing and of the timed write,
paired by repetition, with a 95 % Student-t interval on the log ratios.

    python3 -m layerbench run bench/fill-direct.toml --db fill-direct.db --quiet
    python3 bench/fill_direct.py --db fill-direct.db [--experiment ID]   # default: the latest

The plan runs the same stream-write twice on each stack, `sw-direct` (fill_with "direct")
and `sw-write` (fill_with "write"), interleaved. Prints Markdown."""

import math
import statistics
import sys
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import stored  # noqa: E402

from layerbench.core.runs import RunRecord  # noqa: E402
from layerbench.executors import local  # noqa: E402
from layerbench.store import ExperimentRecord  # noqa: E402

DIRECT, CACHED = "sw-direct", "sw-write"


def _ratio(pairs: list[tuple[float, float]]) -> str:
    """Geometric mean of first / second with its 95 % interval."""
    logs = np.log([a / b for a, b in pairs if a > 0 and b > 0])
    if len(logs) < 2:
        return "-"
    half = scipy_stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
    low, mid, high = (math.exp(logs.mean() + k * half) for k in (-1, 0, 1))
    return f"x{mid:.2f} [{low:.2f}-{high:.2f}]"


def rows(runs: list[RunRecord]) -> list[str]:
    measured = [r for r in runs if r.measured and r.status == "ok"]
    by = {(r.stack, r.workload, r.rep): r for r in measured}
    lines = []
    for stack in dict.fromkeys(r.stack for r in measured):
        reps = sorted(rep for s, w, rep in by if s == stack and w == DIRECT and (s, CACHED, rep) in by)
        pairs = [(by[(stack, DIRECT, rep)], by[(stack, CACHED, rep)]) for rep in reps]
        median = statistics.median
        prepare = [
            (d.fact(local.PHASE_PREPARE_S) or 0.0, c.fact(local.PHASE_PREPARE_S) or 0.0) for d, c in pairs
        ]
        timed = [(d.wall_s, c.wall_s) for d, c in pairs]
        lines.append(
            f"| {stack} | {len(pairs)} | {median(p[0] for p in prepare):.2f} s, "
            f"{median(p[1] for p in prepare):.2f} s | {_ratio(prepare)} | "
            f"{median(t[0] for t in timed):.3f} s, {median(t[1] for t in timed):.3f} s | "
            f"{_ratio(timed)} |"
        )
    return lines


def show(db: str, experiment: ExperimentRecord, runs: list[RunRecord]) -> str:
    return "\n".join(
        [
            f"The fill written with O_DIRECT against through the page cache, experiment {experiment.id}"
            f" ({db})\n",
            "| stack | pairs | preparing (median): direct, page cache | ratio [95 %] "
            "| timed write (median): direct, page cache | ratio [95 %] |",
            "|---|---|---|---|---|---|",
            *rows(runs),
        ]
    )


if __name__ == "__main__":
    sys.exit(stored.main(__doc__ or "", "fill-direct.db", show))
