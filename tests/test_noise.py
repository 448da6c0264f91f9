"""Noise control: CPU pinning of the timed run; other work during a run is measured and flagged."""

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from layerbench.core.runs import RunRecord
from layerbench.observe import measure, noise


def test_the_timed_run_is_pinned_and_the_harness_is_not(tmp_path: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("pinning is only visible with two or more usable CPUs")
    before = os.sched_getaffinity(0)
    cpu = max(before)
    script = "grep Cpus_allowed_list /proc/self/status > pinned"
    counters = measure.run_timed(["sh", "-c", script], cwd=tmp_path, cpus=[cpu])
    assert counters.status == "ok"
    assert (tmp_path / "pinned").read_text().split()[-1] == str(cpu)
    assert counters.facts["cpus"] == [cpu]
    assert os.sched_getaffinity(0) == before


def test_every_run_records_load_and_other_work(tmp_path: Path) -> None:
    counters = measure.run_timed(["true"], cwd=tmp_path)
    assert {"load_1m", "others_cpu_s", "others_cpu_share", "disturbed"} <= set(counters.facts)


def test_a_cpu_hog_beside_the_run_flags_it_disturbed(tmp_path: Path) -> None:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        counters = measure.run_timed(["sleep", "1"], cwd=tmp_path)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert counters.facts["disturbed"] is True, counters.facts
    assert counters.facts["others_cpu_s"] > 0.5
    run = RunRecord(0, "s", "w", "ok", facts=counters.facts)
    (line,) = noise.warnings([run, replace(run, facts={"disturbed": False})])
    assert line.startswith("1 run(s) disturbed") and "s/w rep 1" in line


def test_judge_counts_only_what_the_run_did_not_do() -> None:
    before = noise.Snapshot(load_1m=0.5, runnable=1, busy_s=100.0)
    after = noise.Snapshot(load_1m=0.5, runnable=1, busy_s=101.0)
    quiet = noise.judge(before, after, wall_s=1.0, own_cpu_s=0.98)
    assert quiet["others_cpu_s"] == pytest.approx(0.02) and quiet["disturbed"] is False
    busy = noise.judge(before, after, wall_s=1.0, own_cpu_s=0.0)
    assert busy["others_cpu_s"] == pytest.approx(1.0)
    assert busy["disturbed"] is ((os.cpu_count() or 1) < 4)
