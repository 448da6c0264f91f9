"""What the host did around the runs: the settle wait before each timed run and the drift
sentinel between rounds. Shared by every report format (not a format itself)."""

from datetime import datetime

import numpy as np

from layerbench.analysis import drift
from layerbench.core.runs import RunRecord
from layerbench.core.sizes import format_size
from layerbench.executors import local
from layerbench.observe import sentinel, settle
from layerbench.store import ExperimentRecord


def settle_rows(runs: list[RunRecord]) -> list[list[str]]:
    """One row per trial: how long it waited for quiet devices before its timed run."""
    rows = []
    for run in runs:
        waited = run.fact(settle.WAITED_S)
        if waited is None:
            continue
        rows.append(
            [
                str(run.trial),
                run.stack,
                run.workload,
                f"{waited:.3f}",
                f"{run.fact(settle.BUSY_S) or 0:.3f}",
                str(run.fact(settle.IN_FLIGHT) or 0),
                format_size(run.fact(settle.WRITTEN_BYTES) or 0),
                format_size(run.fact(settle.DISCARDED_BYTES) or 0),
                "yes" if run.fact(settle.TIMED_OUT) else "",
            ]
        )
    return rows


SETTLE_HEADER = [
    "trial",
    "stack",
    "workload",
    "waited s",
    "busy s",
    "in flight",
    "written",
    "discarded",
    "timed out",
]


def settle_line(runs: list[RunRecord]) -> str | None:
    waited = [(wait, r) for r in runs if (wait := r.fact(settle.WAITED_S)) is not None]
    if not waited:
        return None
    waits = [wait for wait, _ in waited]
    slowest = max(waited, key=lambda pair: pair[0])[1]
    timed_out = sum(bool(r.fact(settle.TIMED_OUT)) for r in runs)
    line = (
        f"settle before each timed run: median {float(np.median(waits)):.2f} s, longest "
        f"{max(waits):.2f} s (trial {slowest.trial}, {slowest.stack} × {slowest.workload})"
    )
    cut = sum(bool(r.fact(settle.CUT_SHORT)) for r in runs)
    line += f"; {timed_out} trial(s) timed out waiting for quiet devices" if timed_out else ""
    if cut:
        line += (
            f"; {cut} of them waited at most {settle.CUT_TIMEOUT_S:.0f} s, after a wait that had found "
            "the devices busy throughout (work that is not the trials')"
        )
    return line


def _seconds_between(started: str | None, finished: str | None) -> float | None:
    if not started or not finished:
        return None
    return (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()


def sentinel_line(experiment: ExperimentRecord, samples: list[sentinel.Sample]) -> str | None:
    """The sentinel's medians and what it cost."""
    if not samples:
        return None
    cost = sum(s.cost_s for s in samples)
    medians = ", ".join(
        f"{name} {1000 * float(np.median(values)):.1f} ms"
        + (f" CV {100 * float(np.std(values, ddof=1) / np.mean(values)):.0f} %" if len(values) > 1 else "")
        for name in sentinel.PARTS
        if (values := [s.parts[name] for s in samples if name in s.parts])
    )
    line = f"drift sentinel: {len(samples)} probes (median {medians}); cost {cost:.1f} s"
    total = _seconds_between(experiment.started, experiment.finished)
    return line + (f", {100 * cost / total:.1f} % of the experiment" if total else "")


_PHASES = {
    local.PHASE_BUILD_S: "building the stack",
    local.PHASE_PREPARE_S: "preparing the workload",
    local.PHASE_WARM_MEMORY_S: "holding memory warm for the run",
    local.PHASE_AROUND_RUN_S: "around the run (caches, settling, counters)",
    local.PHASE_TEARDOWN_S: "tearing down",
}


def time_share_line(experiment: ExperimentRecord, runs: list[RunRecord]) -> str | None:
    """How much of the experiment's time its timed runs took, and where the rest of a
    trial's time went (its phase_*_s facts): the rest buys no repetition."""
    total = _seconds_between(experiment.started, experiment.finished)
    timed = [r for r in runs if r.ok]
    if not total or not timed:
        return None
    in_runs = sum(r.wall_s for r in timed)
    untimed = (total - in_runs) / len(runs)
    line = f"time in timed runs: {in_runs:.0f} s of {total:.0f} s ({100 * in_runs / total:.0f} %); "
    line += f"the rest is {untimed:.2f} s per trial"
    means = {}
    for phase, words in _PHASES.items():
        if values := [seconds for r in runs if (seconds := r.fact(phase)) is not None]:
            means[words] = sum(values) / len(values)
    if not means:
        return line + " of building, preparing, settling and tearing down"
    return line + ": " + ", ".join(f"{words} {mean:.2f} s" for words, mean in means.items()) + " (means)"


def drift_warning(samples: list[sentinel.Sample]) -> str | None:
    return drift.sentence(drift.within(samples), where="during the experiment (later half against earlier)")


def sentinel_series(
    sides: dict[str, list[sentinel.Sample]], reference: list[sentinel.Sample]
) -> dict[str, tuple[list[float], list[float]]]:
    """Per side and part: (minutes since the first probe of all, the probe's time over the
    reference's median of that part)."""
    stamps = [datetime.fromisoformat(s.taken) for side in sides.values() for s in side if s.taken]
    start = min(stamps) if stamps else None
    series: dict[str, tuple[list[float], list[float]]] = {}
    for prefix, samples in sides.items():
        for name in dict.fromkeys(n for s in samples for n in s.parts):
            base = [s.parts[name] for s in reference if s.parts.get(name)]
            if not base or start is None:
                continue
            middle = float(np.median(base))
            label = sentinel.PARTS[name].label if name in sentinel.PARTS else name
            chosen = [s for s in samples if name in s.parts]
            series[f"{prefix}{label}"] = (
                [(datetime.fromisoformat(s.taken) - start).total_seconds() / 60 for s in chosen],
                [s.parts[name] / middle for s in chosen],
            )
    return series
