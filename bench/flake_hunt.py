#!/usr/bin/env python3
"""The flake hunt: run each test module many times, alone and beside a CPU + I/O neighbour,
and print how often each test passed, the slowest tests and the total time.

    python3 bench/flake_hunt.py [--rounds 10] [--modules tests/e2e] [--neighbour both|alone|busy]
                                [--scratch /var/tmp/lb-flakes] [--out FILE.md]
                                [--ledger FILE.jsonl]

A round runs every module once in its own pytest process (its own test root under the
scratch root, its results read from a JUnit XML file), in a shuffled order. Beside the
neighbour, `stress-ng` (Debian's package) runs for the module's whole run: one CPU worker
(the other core is the tests'), one I/O worker (sync(2) in a loop) and one disk writer with
its files under the scratch root; it is bounded by `--timeout` and stopped with the module.

With `--ledger`, every module's run is also appended to a JSON-lines file as it ends (the
commit it ran, the condition, each test's outcome), and the table counts every run the ledger
holds: a hunt too long for one sitting is done in parts, and a hunt stopped halfway keeps what
it ran; `--minutes M` starts no module's run after M minutes, so a part ends on time with
nothing cut short. `--rounds 0 --ledger FILE` prints the ledger's table without running anything.

A failed test is never run again to turn it green: every run of every test is counted as it
came out. Exits 1 if any test failed or errored in any run. Needs root (as the suite does).
"""

import argparse
import contextlib
import datetime
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from layerbench.linux import mounts
from layerbench.scratch.policy import MARKER

REPO = Path(__file__).resolve().parent.parent
# The neighbour's bound: no module of the suite takes this long alone.
NEIGHBOUR_LIMIT_S = 1800
STOP_GRACE_S = 120  # how long a stopped pytest may take to tear its test down


@dataclass
class Outcomes:
    """Every run of one test under one condition."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: list[float] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    @property
    def ran(self) -> int:
        return self.passed + self.failed


def modules(selected: list[str]) -> list[Path]:
    found: list[Path] = []
    for name in selected:
        path = (REPO / name).resolve()
        if path.is_dir():
            found += sorted(path.glob("test_*.py"))
        elif path.is_file():
            found.append(path)
        else:
            raise SystemExit(f"flake_hunt: {name}: no such test module or directory")
    return found


@contextlib.contextmanager
def neighbour(scratch: Path) -> Iterator[None]:
    """stress-ng on one CPU, sync(2) in a loop and a disk writer, until the block ends."""
    stress = shutil.which("stress-ng")
    if stress is None:
        raise SystemExit("flake_hunt: stress-ng is not installed (deps/apt.txt has it)")
    where = scratch / "neighbour"
    where.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen(
        [
            stress,
            "--cpu",
            "1",
            "--io",
            "1",
            "--hdd",
            "1",
            "--hdd-bytes",
            "256M",
            "--temp-path",
            str(where),
            "--timeout",
            f"{NEIGHBOUR_LIMIT_S}s",
            "--quiet",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        process_group=0,
    )
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        shutil.rmtree(where, ignore_errors=True)


def run_module(
    module: Path, scratch: Path, timeout: float
) -> tuple[list[tuple[str, str, float, str]], float]:
    """One pytest process for the module: (test id, outcome, seconds, message) per test."""
    # The module's test root, as short as the suite's own (/var/tmp/layerbench-tests/sPID):
    # Ray's Unix sockets lie below it, and their paths may not pass 107 bytes. Readable by
    # all, as the suite's is: the PostgreSQL tests run initdb in it as the postgres user.
    root = Path(tempfile.mkdtemp(prefix="t", dir=scratch))
    root.chmod(0o755)
    report = root.with_suffix(".xml")  # beside it: the session removes its root when done
    env = {**os.environ, "LAYERBENCH_TEST_ROOT": str(root)}
    started = time.monotonic()
    try:
        done = _pytest(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--junitxml={report}",
                "-o",
                "junit_family=xunit1",  # each case names its file: a class's tests are told apart
                str(module.relative_to(REPO)),
            ],
            env,
            timeout,
        )
        took = time.monotonic() - started
        if not report.exists():
            tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]
            return [(str(module.relative_to(REPO)), "failed", took, f"no report: {tail[0]}")], took
        return _read_junit(report), took
    except subprocess.TimeoutExpired:
        took = time.monotonic() - started
        return [(str(module.relative_to(REPO)), "failed", took, f"timed out after {timeout:g} s")], took
    finally:
        _release(root)
        report.unlink(missing_ok=True)


def _release(root: Path) -> None:
    """Remove the module's test root. A module stopped or timed out mid-test may leave a run's
    mounts, loop devices or processes under it: each scratch root there is recovered with
    `layerbench clean` first (its journal says what it holds; deleting the files first would
    lose that), and a root that still holds a mount is left, with a line that says so."""
    for scratch in _scratch_roots(root):
        subprocess.run(
            [sys.executable, "-m", "layerbench", "clean", "--scratch", str(scratch)],
            cwd=REPO,
            capture_output=True,
            check=False,
        )
    if mounts.mounts_under(root):
        print(f"flake_hunt: {root} still holds mounts after layerbench clean; left for you", file=sys.stderr)
        return
    shutil.rmtree(root, ignore_errors=True)


def _scratch_roots(root: Path) -> list[Path]:
    """Directories under root that a layerbench run made its scratch root (they hold its
    marker), without descending into mount points."""
    found = []
    for directory, subdirectories, files in os.walk(root):
        if MARKER in files:
            found.append(Path(directory))
        subdirectories[:] = [d for d in subdirectories if not os.path.ismount(os.path.join(directory, d))]
    return found


def _pytest(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run one pytest process. Stopped (Ctrl-C, or SIGTERM, which main() turns into the same),
    it gets a SIGINT of its own, so that its fixtures tear down what the test under way built
    (subprocess.run would SIGKILL it and leave that behind)."""
    child = subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        process_group=0,
        # A hunt started in the background (`&`) has SIGINT ignored, and its children would
        # inherit that: pytest must hear the SIGINT that stops it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        _stop(child)
        raise
    return subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)


def _stop(child: subprocess.Popen[str]) -> None:
    """SIGINT to pytest alone (its fixtures stop the runs under it), then the group if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        child.send_signal(signal.SIGINT)
    try:
        child.communicate(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.communicate()


def _read_junit(report: Path) -> list[tuple[str, str, float, str]]:
    found = []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        test = _test_id(case.get("file"), case.get("classname", ""), case.get("name", ""))
        seconds = float(case.get("time") or 0)
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", (child.get("message") or "").splitlines()[0][:160]
            elif child.tag == "skipped":
                outcome, message = "skipped", (child.get("message") or "")[:160]
        found.append((test, outcome, seconds, message))
    return found


def _test_id(file: str | None, classname: str, name: str) -> str:
    """pytest's id of a case: its file, the class it is in (if any), its name. The classname
    is the module's dotted path, and the class's name after it."""
    if not file:
        return f"{classname.replace('.', '/')}.py::{name}"
    module = file.removesuffix(".py").replace("/", ".")
    within = classname.removeprefix(module).lstrip(".")
    return "::".join(part for part in (file, within, name) if part)


@dataclass(frozen=True)
class ModuleRun:
    """One pytest process of one module under one condition: a line of the ledger."""

    commit: str
    condition: str
    module: str
    took: float
    tests: list[tuple[str, str, float, str]]

    def line(self) -> str:
        at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        return json.dumps({"at": at, **self.__dict__}) + "\n"


def commit() -> str:
    """The checkout's commit, marked when its tracked files differ from it."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=REPO).returncode != 0
    return (head or "unknown") + ("-dirty" if dirty else "")


def read_ledger(ledger: Path) -> list[ModuleRun]:
    """Every module run a ledger holds; a line that is not one is an error naming it."""
    found = []
    for number, text in enumerate(ledger.read_text().splitlines(), start=1):
        try:
            entry = json.loads(text)
            found.append(
                ModuleRun(
                    commit=str(entry["commit"]),
                    condition=str(entry["condition"]),
                    module=str(entry["module"]),
                    took=float(entry["took"]),
                    tests=[(str(t), str(o), float(s), str(m)) for t, o, s, m in entry["tests"]],
                )
            )
        except (ValueError, KeyError, TypeError) as error:
            print(f"flake_hunt: {ledger}:{number}: not a module run ({error})", file=sys.stderr)
            raise SystemExit(2) from None
    return found


def hunt(
    selected: list[Path],
    rounds: int,
    conditions: list[str],
    scratch: Path,
    timeout: float,
    ledger: Path | None = None,
    minutes: float | None = None,
) -> tuple[list[ModuleRun], float]:
    runs: list[ModuleRun] = []
    started = time.monotonic()
    order = random.Random(1)
    checkout = commit()
    for number in range(1, rounds + 1):
        for condition in conditions:
            shuffled = list(selected)
            order.shuffle(shuffled)
            for module in shuffled:
                if minutes is not None and time.monotonic() - started > 60 * minutes:
                    print(f"flake_hunt: {minutes:g} minutes are up, stopping", file=sys.stderr)
                    return runs, time.monotonic() - started
                around = neighbour(scratch) if condition == "busy" else contextlib.nullcontext()
                with around:
                    tests, took = run_module(module, scratch, timeout)
                ran = ModuleRun(checkout, condition, str(module.relative_to(REPO)), took, tests)
                runs.append(ran)
                if ledger is not None:
                    with ledger.open("a") as out:
                        out.write(ran.line())
                bad = sum(1 for _, outcome, _, _ in tests if outcome == "failed")
                print(
                    f"round {number}/{rounds} {condition:5} {ran.module}: "
                    f"{len(tests)} tests, {bad} failed, {took:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    return runs, time.monotonic() - started


def tally(runs: list[ModuleRun]) -> dict[tuple[str, str], Outcomes]:
    """Every test's outcomes per condition, over the module runs given."""
    results: dict[tuple[str, str], Outcomes] = defaultdict(Outcomes)
    for ran in runs:
        for test, outcome, seconds, message in ran.tests:
            seen = results[(test, ran.condition)]
            if outcome == "passed":
                seen.passed += 1
            elif outcome == "skipped":
                seen.skipped += 1
            else:
                seen.failed += 1
                seen.messages.append(message)
            seen.seconds.append(seconds)
    return results


def table(runs: list[ModuleRun], conditions: list[str], total_s: float) -> str:
    results = tally(runs)
    tests = sorted({test for test, _ in results})
    header = "| test | " + " | ".join(f"passed {c}" for c in conditions) + " | first failure |"
    lines = [header, "|---|" + "---|" * len(conditions) + "---|"]
    flaky = [t for t in tests if any(results[(t, c)].failed for c in conditions if (t, c) in results)]
    for test in flaky + [t for t in tests if t not in flaky]:
        cells = []
        for condition in conditions:
            seen = results.get((test, condition))
            cells.append(
                "-" if seen is None else f"{seen.passed}/{seen.ran}" + (" (skipped)" if not seen.ran else "")
            )
        messages = [m for c in conditions if (test, c) in results for m in results[(test, c)].messages]
        lines.append(f"| {test} | " + " | ".join(cells) + f" | {messages[0] if messages else ''} |")
    count = sum(seen.ran for seen in results.values())
    failures = sum(seen.failed for seen in results.values())
    slowest = sorted(
        (
            (statistics.median(seen.seconds), test, condition)
            for (test, condition), seen in results.items()
            if seen.seconds
        ),
        reverse=True,
    )[:10]
    lines += [
        "",
        f"{len(tests)} tests, {count} runs, {failures} failed or errored, {len(flaky)} tests flaky; "
        f"total {total_s / 60:.1f} min",
        "",
        "Commits: " + ", ".join(sorted({ran.commit for ran in runs})),
        "",
        "Slowest tests (median seconds of a run):",
        "",
    ]
    lines += [f"- {seconds:.1f} s  {test} ({condition})" for seconds, test, condition in slowest]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--modules", nargs="+", default=["tests/e2e"])
    parser.add_argument("--neighbour", choices=["both", "alone", "busy"], default="both")
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp/lb-flakes"))
    parser.add_argument("--timeout", type=float, default=1500, help="seconds one module may take")
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    parser.add_argument(
        "--minutes", type=float, help="start no module's run after this long (the ones done count)"
    )
    parser.add_argument("--ledger", type=Path, help="append each module's run here; count all it holds")
    args = parser.parse_args()
    # A SIGTERM stops the hunt as Ctrl-C does: the module's pytest and the neighbour go first.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if os.geteuid() != 0:
        print("flake_hunt: the suite's end-to-end tests need root", file=sys.stderr)
        return 2
    if args.rounds < 0 or (args.rounds == 0 and args.ledger is None):
        print("flake_hunt: --rounds must be at least 1 (0 only with --ledger)", file=sys.stderr)
        return 2
    earlier = read_ledger(args.ledger) if args.ledger and args.ledger.exists() else []
    conditions = ["alone", "busy"] if args.neighbour == "both" else [args.neighbour]
    args.scratch.mkdir(parents=True, exist_ok=True)
    try:
        runs, total = hunt(
            modules(args.modules),
            args.rounds,
            conditions,
            args.scratch,
            args.timeout,
            args.ledger,
            args.minutes,
        )
    finally:
        with contextlib.suppress(OSError):
            args.scratch.rmdir()  # only when empty: never a directory that holds anything else
    if args.ledger:
        runs = earlier + runs
        total = sum(ran.took for ran in runs)
        conditions = sorted({ran.condition for ran in runs}, key=["alone", "busy"].index)
    text = table(runs, conditions, total)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 1 if any(outcome == "failed" for ran in runs for _, outcome, _, _ in ran.tests) else 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        print("flake_hunt: stopped; the ledger keeps the modules that ended", file=sys.stderr)
        raise SystemExit(130) from None
