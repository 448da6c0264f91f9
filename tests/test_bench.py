"""bench/run.py runs end to end with tiny sizes (a smoke test, not a benchmark)."""

import importlib.util
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import REPO, TEST_ROOT, leftovers


@pytest.mark.e2e
def test_bench_runs_and_prints_every_ratio(needs_root: None) -> None:
    scratch = TEST_ROOT / "bench"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "run.py"), "--tiny", "--scratch", str(scratch)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    checks = [row.split(" | ")[0].removeprefix("| ") for row in rows[1:]]
    assert checks[:2] == ["per-run overhead, `true`", "per-run overhead, `sleep 1`"]
    assert any("vs `dd conv=fsync`" in c for c in checks) and any("vs `fio`" in c for c in checks)
    assert any("vs `tar -xf`" in c for c in checks)
    fio_rows = [c for c in checks if c.startswith("fio workload")]
    assert len(fio_rows) == 4 and sum(c.endswith(": IOPS") for c in fio_rows) == 2
    # Two-sided: the goal is a band around 1, and every ratio row says whether it is met.
    ratio_rows = [row for row in rows[2:] if "1 ± 3%" in row]
    said = ("yes", "NO", "undecided", "yes (no interval)", "NO (no interval)")
    assert len(ratio_rows) == 7 and all(row.rstrip(" |").split(" | ")[-1] in said for row in ratio_rows)
    assert any("peak memory" in c for c in checks)
    assert leftovers(scratch) == [] and not scratch.exists()


def _bench() -> Any:
    """bench/run.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("bench_run", REPO / "bench" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _contender(ratio: float, noise: float, seed: int, calls: list[str], name: str) -> Callable[[], float]:
    rng = np.random.default_rng(seed)

    def result() -> float:
        calls.append(name)
        return float(ratio * np.exp(rng.normal(0, noise)))

    return result


def _interval(cell: str) -> tuple[float, int]:
    """The level (in %) and the rounds of a ratio cell: "R [LOW-HIGH, LEVEL%], N rounds"."""
    found = re.fullmatch(r"[\d.]+ \[[\d.]+-[\d.]+, ([\d.]+)%\], (\d+) rounds", cell)
    assert found, cell
    return float(found[1]), int(found[2])


def test_a_row_still_undecided_gets_more_rounds_and_only_its_contenders_run() -> None:
    bench = _bench()
    calls: list[str] = []
    contenders = {
        "ours": _contender(1.0, 0.002, 1, calls, "ours"),
        "same": _contender(1.0, 0.002, 2, calls, "same"),  # x1.00, quiet: met at the first look
        "near": _contender(1 / 1.026, 0.01, 3, calls, "near"),  # x1.026, noisy: near the band's edge
    }
    rows = [bench.Row("same", "ours", "same", "s"), bench.Row("near", "ours", "near", "s")]
    same, near = bench.sequential(5, 4, contenders, rows)
    assert same[-1] == "yes" and _interval(same[3])[1] == 5
    level, rounds = _interval(near[3])
    assert rounds > 5 and rounds % 5 == 0, near  # looked again, each time after 5 more rounds
    # after the first look only the open row's contenders ran: one warm-up call, then 5 rounds
    assert calls.count("same") == 1 + 5 and calls.count("near") == 1 + rounds
    # every look is drawn at 1 - 0.05 / 4 at least (an exact rank interval reaches a bit more)
    assert near[-1] in ("yes", "undecided") and min(level, _interval(same[3])[0]) >= 98.75


def test_a_row_open_at_the_last_look_stays_undecided_at_the_spent_level() -> None:
    bench = _bench()
    calls: list[str] = []
    contenders = {
        "ours": _contender(1.0, 0.2, 4, calls, "ours"),
        "plain": _contender(1.0, 0.2, 5, calls, "plain"),  # 20 % noise: no look can decide it
    }
    (row,) = bench.sequential(5, 2, contenders, [bench.Row("noisy", "ours", "plain", "s")])
    level, rounds = _interval(row[3])
    assert row[-1] == "undecided" and rounds == 10 and level >= 97.5, row
    assert calls.count("ours") == calls.count("plain") == 1 + 10
