"""The split of elapsed time and its attribution (decompose.py), and the why line built on
it: on real runs recorded on this machine, and on counter sets made to test each rule."""

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from layerbench import stats
from layerbench.analysis import decompose, explain
from layerbench.core.runs import RunRecord

FIXTURE = Path(__file__).parent / "fixtures" / "kernel-runs-2026-12-01.json"


def _recorded() -> tuple[list[RunRecord], str]:
    document = json.loads(FIXTURE.read_text())
    return [RunRecord.from_row(run) for run in document["runs"]], document["baseline"]


def _summaries(runs: list[RunRecord], baseline: str, workload: str = "w") -> list[stats.Summary]:
    stacks = list(dict.fromkeys(r.stack for r in runs))
    return stats.summaries(runs, baseline, stacks, [workload])


def test_recorded_fuse_runs_attribute_the_difference_and_add_up() -> None:
    runs, baseline = _recorded()
    rows = _summaries(runs, baseline)
    groups = stats.measured(runs)
    found = decompose.attribute(rows, baseline, "fuse", "w", groups)
    assert found is not None
    assert found.difference > 0.1
    # bindfs has a daemon the plain directory has not: its CPU is named, the largest part.
    assert found.top is not None and found.top.metric == "helper_cpu_s"
    assert found.unattributed + sum(c.delta for c in found.named) == pytest.approx(found.difference)
    assert "unattributed" in found.text()


def test_recorded_split_sums_to_the_elapsed_time() -> None:
    runs, baseline = _recorded()
    rows = _summaries(runs, baseline)
    for stack in ("disk", "image", "fuse"):
        split = decompose.split(rows, stack, "w")
        assert split is not None
        assert set(split.parts) == set(decompose.METRICS)
        assert all(value is not None for value in split.parts.values())
        assert split.rest + sum(split.parts.values()) == pytest.approx(split.elapsed)  # type: ignore[arg-type]
        assert sum(value for _, value in split.bars()) == pytest.approx(split.elapsed)


def test_recorded_image_flow_goes_down_through_the_loop_device() -> None:
    runs, _ = _recorded()
    image = [r for r in runs if r.stack == "image"]
    text = decompose.flow_text(image)
    assert text is not None
    assert text.startswith("64M written by the workload -> ")
    assert " to loop" in text and text.index("to loop") < text.index("to vda")
    layers = decompose.layers_of_run(image[0])
    assert [layer["device"][:4] for layer in layers] == ["loop", "vda"]
    assert layers[-1]["write_amplification"] >= 1.0


def _run(stack: str, rep: int, wall: float, **values: Any) -> RunRecord:
    run: dict[str, Any] = {
        "stack": stack,
        "workload": "w",
        "rep": rep,
        "warmup": 0,
        "status": "ok",
        "trial": rep,
        "facts": {},
        "devices": {},
        "units": None,
        "unit": None,
        "wall_s": wall,
    }
    for metric in decompose.METRICS:
        run[metric] = values.get(metric, 0.0)
    run.update({k: v for k, v in values.items() if k not in decompose.METRICS})
    return RunRecord.from_row(run)


def _pair(
    base: dict[str, float], slow: dict[str, float], wall: tuple[float, float], n: int = 6
) -> list[dict[str, Any]]:
    """n runs of each, with small deterministic jitter so the tests can decide."""
    runs = []
    for rep in range(n):
        jitter = 1 + 0.01 * ((rep * 7) % 5 - 2)
        runs.append(_run("base", rep, wall[0] * jitter, **{k: v * jitter for k, v in base.items()}))
        runs.append(_run("slow", rep, wall[1] * jitter, **{k: v * jitter for k, v in slow.items()}))
    return runs


def test_the_io_stall_on_a_saturated_disk_reads_as_the_bottleneck() -> None:
    base = {"psi_io_some_s": 0.2, "sys_s": 0.3, "kthread_cpu_s": 0.05, "disk_busy_pct": 60.0}
    slow = {"psi_io_some_s": 0.7, "sys_s": 0.31, "kthread_cpu_s": 0.06, "disk_busy_pct": 95.0}
    runs = [
        replace(run, facts={"kernel": {"devices_top_first": ["loop0", "vda"]}})
        for run in _pair(base, slow, (1.0, 1.6))
    ]
    rows = stats.summaries(runs, "base", ["base", "slow"], ["w"])
    why = explain.why(rows, "base", "slow", "w", stats.measured(runs))
    assert why is not None
    line = why.line()
    assert "+0.60 s elapsed: +0.50 s stalled on I/O (PSI)" in line
    assert "vda busy 95 % vs 60 %" in line
    assert "so: the disk behind the stack (vda) was the bottleneck" in line
    # system time moved by 0.01 s of a 0.6 s difference: not material, not named.
    assert "workload on CPU (system)" not in line


def test_a_part_that_moved_the_other_way_or_too_little_is_not_named() -> None:
    base = {"psi_io_some_s": 0.5, "user_s": 0.2}
    slow = {"psi_io_some_s": 0.3, "user_s": 0.22}  # stall fell; user rose by 0.02 of a 0.5 s rise
    runs = _pair(base, slow, (1.0, 1.5))
    rows = stats.summaries(runs, "base", ["base", "slow"], ["w"])
    found = decompose.attribute(rows, "base", "slow", "w", stats.measured(runs))
    assert found is not None and found.named == []
    assert found.unattributed == pytest.approx(found.difference)
    assert "no part of the split explains it" in found.text()


def test_an_insignificant_part_is_not_named() -> None:
    # The stall differs in its medians, but the stack's values straddle the baseline's.
    runs = []
    for rep, (b, s) in enumerate([(0.2, 0.1), (0.3, 0.5), (0.25, 0.6), (0.2, 0.15), (0.3, 0.45)]):
        runs.append(_run("base", rep, 1.0 + rep * 0.001, psi_io_some_s=b))
        runs.append(_run("slow", rep, 1.5 + rep * 0.001, psi_io_some_s=s))
    rows = stats.summaries(runs, "base", ["base", "slow"], ["w"])
    stall = next(r for r in rows if r.stack == "slow" and r.metric == "psi_io_some_s")
    assert not stall.significant
    found = decompose.attribute(rows, "base", "slow", "w", stats.measured(runs))
    assert found is not None and all(c.metric != "psi_io_some_s" for c in found.named)


def test_a_helper_the_baseline_has_not_is_named_without_a_ratio() -> None:
    runs = _pair({"helper_cpu_s": 0.0}, {"helper_cpu_s": 0.4}, (1.0, 1.5))
    rows = stats.summaries(runs, "base", ["base", "slow"], ["w"])
    found = decompose.attribute(rows, "base", "slow", "w", stats.measured(runs))
    assert found is not None and found.top is not None
    assert found.top.metric == "helper_cpu_s" and found.top.ratio is None
    assert found.text().startswith("+0.50 s elapsed: +0.40 s helper daemons on CPU")


def test_a_split_whose_parts_exceed_the_elapsed_time_says_they_overlap() -> None:
    split = decompose.Split("s", 1.0, {"user_s": 1.5, "sys_s": 0.2, "psi_io_some_s": None})
    assert split.rest == pytest.approx(-0.7)
    assert split.text().endswith("parts overlap by 0.70 s")


def test_runs_stored_before_the_kernel_counters_keep_the_old_read_out() -> None:
    runs = [
        run.with_values(**dict.fromkeys(decompose.KERNEL_METRICS))
        for run in _pair({"sys_s": 0.1}, {"sys_s": 0.5}, (1.0, 1.5))
    ]
    rows = stats.summaries(runs, "base", ["base", "slow"], ["w"])
    why = explain.why(rows, "base", "slow", "w", stats.measured(runs))
    assert why is not None and why.attribution is None
    assert "system time x" in why.line()
