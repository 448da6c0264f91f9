"""bench/noise_budget.py: a factor planted in a store's runs is the one it names."""

import subprocess
import sys
from pathlib import Path

import numpy as np
from helpers import REPO

from layerbench.executors import local as _declares_the_harness_facts  # noqa: F401
from layerbench.executors.fake import FakeExecutor
from layerbench.experiment import Experiment
from layerbench.plan import parse_plan
from layerbench.plan.schedule import Trial
from layerbench.store import Store

PLAN = """
name = "budget"
reps = 12
warmup = 0
baseline = "a"
sentinel = false
settle = 0
[stacks.a]
layers = []
[stacks.b]
layers = []
[workloads.w]
kind = "command"
run = "true"
"""


def test_the_planted_pre_run_factor_explains_the_noise_and_the_others_do_not(tmp_path: Path) -> None:
    """Elapsed time grows with the memory handed back before the run (x1.5 between stacks
    is taken out); the free memory before the run is drawn apart from it."""
    rng = np.random.default_rng(9)

    def script(trial: Trial) -> dict[str, float]:
        handed_back = int(rng.integers(0, 1_000_000))  # KiB, whole as the kernel counts them
        wall = (
            (1.5 if trial.stack == "b" else 1.0) * (1 + handed_back / 2_000_000) * np.exp(rng.normal(0, 0.01))
        )
        return {
            "wall_s": wall,
            "memory_reported_kib_before_run": handed_back,
            "mem_free_kib_before_run": int(rng.integers(1_000_000, 2_000_000)),
        }

    store = Store(tmp_path / "r.db")
    experiment = Experiment(parse_plan(PLAN, "plan.toml"), store, FakeExecutor(script), seed=3)
    experiment.prepare([])
    experiment.run()
    store.close()
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "noise_budget.py"), "--db", str(tmp_path / "r.db")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ") for line in done.stdout.splitlines()}
    planted = rows["memory handed back to the hypervisor since the last run (KiB)"]
    assert planted[1] == "before" and float(planted[2]) > 0.9 and float(planted[3]) < 1e-6, planted
    apart = rows["free memory (KiB)"]
    assert abs(float(apart[2])) < 0.5 and float(apart[3]) > 0.01, apart
    assert "(not recorded, or constant)" in rows["settle: seconds waited for quiet devices"][-1]
    assert "### w: 24 runs on 2 stacks" in done.stdout


def test_a_missing_store_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "noise_budget.py"), "--db", str(tmp_path / "none.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, (
        done.stderr
    )
