"""bench/run.py runs end to end with tiny sizes (a smoke test, not a benchmark)."""

import subprocess
import sys

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
