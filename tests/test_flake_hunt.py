"""bench/flake_hunt.py: a hunt in parts adds up in its ledger, and a bad ledger is one line."""

import json
import subprocess
import sys
from pathlib import Path

from helpers import REPO, TEST_ROOT, one_line_error

SCRIPT = REPO / "bench" / "flake_hunt.py"
MODULE = "tests/test_sizes.py"  # a few fast tests: the hunt's own work is what is checked


def hunt(ledger: Path, *options: str) -> subprocess.CompletedProcess[str]:
    TEST_ROOT.mkdir(parents=True, exist_ok=True)
    scratch = TEST_ROOT / f"flakes-{ledger.parent.name}"
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--ledger", str(ledger), "--scratch", str(scratch), *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_two_parts_of_a_hunt_count_together_in_the_ledger(tmp_path: Path) -> None:
    ledger = tmp_path / "hunt.jsonl"
    for _ in range(2):
        done = hunt(ledger, "--rounds", "1", "--neighbour", "alone", "--modules", MODULE)
        assert done.returncode == 0, done.stderr
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [e["module"] for e in entries] == [MODULE, MODULE]
    assert all(e["condition"] == "alone" and e["commit"] for e in entries)
    tests = {t[0] for t in entries[0]["tests"]}
    assert len(tests) >= 3 and all(t[1] == "passed" for t in entries[1]["tests"])
    # Only the table, from what the ledger holds: every test ran twice, once in each part.
    done = hunt(ledger, "--rounds", "0")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| tests/")]
    assert len(rows) == len(tests) and all("| 2/2 |" in row for row in rows), done.stdout
    assert f"{len(tests)} tests, {2 * len(tests)} runs, 0 failed" in done.stdout


def test_a_ledger_line_that_is_not_a_module_run_is_named(tmp_path: Path) -> None:
    ledger = tmp_path / "hunt.jsonl"
    ledger.write_text('{"commit": "abc", "condition": "alone"}\n')
    done = hunt(ledger, "--rounds", "0")
    assert done.returncode != 0
    assert f"{ledger}:1: not a module run" in one_line_error(done)


def test_rounds_0_without_a_ledger_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "0"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 2 and "0 only with --ledger" in done.stderr


def test_a_part_whose_minutes_are_up_starts_no_module(tmp_path: Path) -> None:
    ledger = tmp_path / "hunt.jsonl"
    done = hunt(ledger, "--rounds", "3", "--neighbour", "alone", "--modules", MODULE, "--minutes", "0")
    assert done.returncode == 0, done.stderr
    assert "0 minutes are up, stopping" in done.stderr and not ledger.exists()


def test_a_test_in_a_class_is_named_as_pytest_names_it() -> None:
    """JUnit gives a case's module and class as one dotted name: the hunt takes the module
    from the case's file, so a class's tests count under their pytest ids."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("flake_hunt", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    in_class = module._test_id("tests/e2e/test_fleet.py", "tests.e2e.test_fleet.TestOnOneCluster", "test_x")
    assert in_class == "tests/e2e/test_fleet.py::TestOnOneCluster::test_x"
    assert (
        module._test_id("tests/test_sizes.py", "tests.test_sizes", "test_y") == "tests/test_sizes.py::test_y"
    )
