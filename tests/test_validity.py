"""The validity checks: A/A rate and sensitivity on simulated samples; `selftest` for real."""

import pytest
from helpers import cli

from layerbench import validity


def test_a_a_experiments_rarely_find_a_difference() -> None:
    check = validity.aa_simulated(1000)
    assert check.passed, check.figure


def test_a_ten_percent_difference_is_found_with_the_default_reps() -> None:
    check = validity.sensitivity_simulated(1000)
    assert check.passed, check.figure


def test_the_simulation_can_fail() -> None:
    # With noise far above the step, the same check must report failure, not pass blindly.
    assert validity.simulated_rate(0.10, 0.30, validity.DEFAULT_REPS, 300) < validity.SENSITIVITY_MIN_POWER


@pytest.mark.e2e
def test_selftest_passes_and_prints_each_check(needs_root: None, scratch_root: str) -> None:
    done = cli("selftest", "--scratch", str(scratch_root), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    names = [line.split(":")[0] for line in lines]
    assert names == [
        "PASS  A/A rate (simulated)",
        "PASS  sensitivity (simulated)",
        "PASS  A/A plumbing (real)",
        "PASS  known effect",
        "PASS  known effect",
        "PASS  sensitivity (real, 10 % injected)",
    ], done.stdout
    assert "measured 9" in done.stdout or "measured 10" in done.stdout
    assert "selftest: 6 of 6 checks passed" in done.stdout
