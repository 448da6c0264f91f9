"""bench/run_length.py: the spread and the cost to decide, per workload, from a store's runs."""

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
from helpers import REPO

from layerbench.executors import local as _declares_the_phase_facts  # noqa: F401
from layerbench.executors.fake import FakeExecutor
from layerbench.experiment import Experiment
from layerbench.plan import parse_plan
from layerbench.plan.schedule import Trial
from layerbench.store import Store

PLAN = """
name = "length"
reps = 12
warmup = 0
baseline = "a"
sentinel = false
settle = 0
[stacks.a]
layers = []
[stacks.b]
layers = []
[workloads.short]
kind = "command"
run = "true"
[workloads.long]
kind = "command"
run = "true"
"""
SCRIPT = REPO / "bench" / "run_length.py"


def _cells(stdout: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split(" | ") for line in stdout.splitlines() if line.startswith("| ")]
    # keyed by workload, the stack's column dropped (each row is stack b against a)
    return {row[0].strip(): [row[0].strip(), *(cell.strip() for cell in row[2:])] for row in rows}


def test_a_longer_run_has_the_smaller_spread_and_the_untimed_work_is_priced(tmp_path: Path) -> None:
    """Runs five times longer with independent noise: a spread about sqrt(5) smaller; 2 s of
    untimed preparing per trial counted in the experiment time a decision would take."""
    rng = np.random.default_rng(5)

    def script(trial: Trial) -> dict[str, float]:
        length = 5.0 if trial.workload == "long" else 1.0
        return {
            "wall_s": length * math.exp(rng.normal(0, 0.2 / math.sqrt(length))),
            "phase_prepare_s": 2.0,
        }

    store = Store(tmp_path / "r.db")
    experiment = Experiment(parse_plan(PLAN, "plan.toml"), store, FakeExecutor(script), seed=3)
    experiment.prepare([])
    experiment.run()
    store.close()
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--db", str(tmp_path / "r.db")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    cells = _cells(done.stdout)
    assert [line.split(" | ")[1] for line in done.stdout.splitlines() if line.startswith("| short")] == ["b"]
    short_sd = [float(v) for v in cells["short"][3].split(", ")]
    long_sd = [float(v) for v in cells["long"][3].split(", ")]
    assert all(0.1 < sd < 0.35 for sd in short_sd) and all(0.03 < sd < 0.15 for sd in long_sd), (
        short_sd,
        long_sd,
    )
    assert cells["long"][5] == "2.00 s, 2.00 s", cells["long"]
    verdict, need = cells["short"][6], cells["short"][7]
    if "inconclusive" in verdict:  # N repetitions of both stacks: their medians and 4 s of preparing
        reps, seconds = need.split(" reps, ")
        medians = [float(v.removesuffix(" s")) for v in cells["short"][1].split(", ")]
        expected = int(reps) * (sum(medians) + 4.0)  # the medians as printed: to the millisecond
        assert abs(float(seconds.removesuffix(" s")) - expected) <= int(reps) * 0.001 + 0.5, (need, medians)
    else:
        assert need == "-", cells["short"]


def test_a_missing_store_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--db", str(tmp_path / "none.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, (
        done.stderr
    )
