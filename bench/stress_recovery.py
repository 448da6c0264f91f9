#!/usr/bin/env python3
"""The crash matrix, many times: kill a run everywhere it can be killed, then check that
`clean` leaves nothing and `run --resume` completes.

    python3 bench/stress_recovery.py [--passes 20] [--kinds dir,image,...] [--points ...]
                                     [--signals KILL,TERM,INT,HUP] [--namespaces host,private]
                                     [--churn 4] [--jobs 1] [--scratch /var/tmp/layerbench-stress]

Each case is one failpoint x one layer kind x one mount namespace choice x one signal: a
two-trial plan whose stack is that layer kind runs with LAYERBENCH_STOP_AT=POINT, freezes
itself there, gets the signal (then SIGCONT, so a handler runs), and must end as the
signal says (SIGKILL: killed; the others: exit 130). Then `layerbench clean` must exit 0
with no traceback and leave nothing of ours (mounts, loop devices, FUSE daemons, qemu,
control groups), the results file must pass `PRAGMA integrity_check` and keep every run
stored before the signal, and `run --resume` must complete the experiment with every
trial exactly once. Churn cases kill a churn run with SIGKILL at a random moment instead
of a failpoint (the race of a mount(8) in flight).

With --jobs N, N cases of a pass run at once, each in its own directory and scratch root
(so each one's `clean` and leftover checks see only its own); passes still run one after
another, so a case never overlaps itself. Running cases side by side is also a harsher test:
loop devices, mounts and namespaces are claimed and released concurrently.

Prints a Markdown table: one row per case, with how many passes held and how many showed
leftovers, tracebacks, lost runs or a failed resume. Exits 1 if any pass failed.
Needs root. Takes about 7 s per case and pass on a 2-core machine.
"""

import argparse
import concurrent.futures
import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from helpers import leftovers, leftovers_after  # noqa: E402

from layerbench import procfs  # noqa: E402
from layerbench.failpoints import POINTS  # noqa: E402
from layerbench.stacks.base import load_kinds  # noqa: E402

SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "INT": signal.SIGINT, "HUP": signal.SIGHUP}
_LAYER = {
    "tmpfs": '{ kind = "tmpfs", size = "64M" }',
    "image": '{ kind = "image", size = "64M" }',
    "throttle": '{ kind = "throttle", write_bps = "500M" }',
    "vm": '{ kind = "vm", memory = "512M", disk_size = "256M" }',
    "squashfs": '{ kind = "squashfs", content = "builtin:small-tree" }',
    "erofs": '{ kind = "erofs", content = "builtin:small-tree" }',
    "squashfuse": '{ kind = "squashfuse", content = "builtin:small-tree" }',
    "sshfs": '{ kind = "tmpfs", size = "64M" }, { kind = "sshfs" }',
    "fscrypt": '{ kind = "fscrypt", size = "64M" }',
    "limits": '{ kind = "limits", cpus = 1, memory = "256M" }',
}
# Read-only layers are read, not written.
_READ_ONLY = {"squashfs", "erofs", "squashfuse"}
# Failpoints only some layer kinds reach.
_HELPERS = {"fuse", "fuse-overlayfs", "squashfuse", "sshfs", "vm"}
TRIALS = 2


@dataclass
class Outcome:
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    tally: Counter[str] = field(default_factory=Counter)

    def fail(self, what: str, detail: str) -> None:
        self.ok = False
        self.tally[what] += 1
        self.problems.append(f"{what}: {detail[:300]}")


def _plan(kind: str, workload: str) -> str:
    layer = _LAYER.get(kind, f'{{ kind = "{kind}" }}')
    return (
        f'name = "stress"\nreps = {TRIALS}\nwarmup = 0\nseed = 1\nrerun_disturbed = 0\n'
        f"[stacks.s]\nlayers = [{layer}]\n"
        f"[workloads.w]\n{workload}\n"
    )


def _cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "layerbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "layerbench", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
    )


def _stopped(child: subprocess.Popen[str], timeout: float = 300) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stat = procfs.pid_stat(child.pid)
        if stat is not None and stat.state == "T":
            return True
        if child.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def _runs(db: Path) -> list[int]:
    if not db.exists():
        return []
    try:
        # closing(): a connection left open keeps the -wal file of a results file this
        # script deletes for the next case, and a new file beside it would inherit it.
        with contextlib.closing(sqlite3.connect(db, timeout=5)) as connection:
            return [row[0] for row in connection.execute("SELECT trial FROM runs ORDER BY trial")]
    except sqlite3.OperationalError:
        return []


def _integrity(db: Path) -> str:
    with contextlib.closing(sqlite3.connect(db, timeout=5)) as connection:
        return str(connection.execute("PRAGMA integrity_check").fetchone()[0])


def _after(outcome: Outcome, scratch: Path, db: Path, kept: list[int], extra: list[str]) -> None:
    """clean, then the checks every case shares, then resume."""
    done = _cli("clean", "--scratch", str(scratch), "--db", str(db))
    if "Traceback" in done.stdout + done.stderr:
        outcome.fail("traceback", done.stderr)
    if done.returncode != 0:
        outcome.fail("clean failed", done.stderr or done.stdout)
    if left := leftovers_after(scratch, 10):
        outcome.fail("leftovers", "; ".join(left))
    if db.exists():
        if (integrity := _integrity(db)) != "ok":
            outcome.fail("integrity", integrity)
        if lost := sorted(set(kept) - set(_runs(db))):
            outcome.fail("lost runs", f"trials {lost}")
    resumed = _cli("run", "--resume", "1", "--db", str(db), "--scratch", str(scratch), "--quiet", *extra)
    if "Traceback" in resumed.stdout + resumed.stderr:
        outcome.fail("traceback", resumed.stderr)
    complete = resumed.returncode == 0 and _runs(db) == list(range(TRIALS))
    # A run that finished before the signal landed has nothing left to resume.
    if not complete and not (_runs(db) == list(range(TRIALS)) and "nothing to resume" in resumed.stderr):
        last = resumed.stderr.strip().splitlines()[-1:]
        outcome.fail("resume", last[0] if last else f"exit {resumed.returncode}, runs {_runs(db)}")
    if left := leftovers_after(scratch, 10):
        outcome.fail("leftovers", "after resume: " + "; ".join(left))


def failpoint_case(root: Path, kind: str, point: str, where: str, signame: str) -> Outcome:
    outcome = Outcome()
    case = root / f"{kind}-{point}-{where}-{signame}"
    scratch, db, plan = case / "scratch", case / "r.db", case / "plan.toml"
    case.mkdir(parents=True, exist_ok=True)
    db.unlink(missing_ok=True)
    workload = 'kind = "read-tree"' if kind in _READ_ONLY else 'kind = "stream-write"\nsize = "4M"'
    plan.write_text(_plan(kind, workload))
    extra = ["--no-namespace"] if where == "host" else []
    child = _start(
        ["run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", *extra],
        {"LAYERBENCH_STOP_AT": point},
    )
    if not _stopped(child):
        _, stderr = child.communicate()
        outcome.fail("never stopped", stderr or f"exit {child.returncode}")
        _after(outcome, scratch, db, [], extra)
        return outcome
    kept = _runs(db)
    child.send_signal(SIGNALS[signame])
    if signame != "KILL":
        child.send_signal(signal.SIGCONT)
    _, stderr = child.communicate(timeout=300)
    expected = -signal.SIGKILL if signame == "KILL" else 130
    if "Traceback" in stderr:
        outcome.fail("traceback", stderr)
    if child.returncode != expected:
        outcome.fail("exit status", f"{child.returncode}, not {expected}: {stderr.strip()[-200:]}")
    if signame != "KILL" and (left := leftovers(scratch)):
        outcome.fail("leftovers", "before clean: " + "; ".join(left))
    _after(outcome, scratch, db, kept, extra)
    return outcome


def churn_case(root: Path, where: str, rng: random.Random, number: int = 0) -> Outcome:
    outcome = Outcome()
    case = root / f"churn-{where}-{number}"
    scratch, db, plan = case / "scratch", case / "r.db", case / "plan.toml"
    case.mkdir(parents=True, exist_ok=True)
    db.unlink(missing_ok=True)
    plan.write_text(_plan("image", 'kind = "churn"\nduration = 3\nfiles = 2'))
    extra = ["--no-namespace"] if where == "host" else []
    child = _start(["run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", *extra], {})
    deadline = time.monotonic() + 120
    while (
        not list(scratch.glob("trials/*/churn/L*")) and time.monotonic() < deadline and child.poll() is None
    ):
        time.sleep(0.005)
    time.sleep(rng.uniform(0, 1.5))
    kept = _runs(db)
    child.kill()
    child.communicate(timeout=60)
    _after(outcome, scratch, db, kept, extra)
    return outcome


def main() -> int:
    kinds = sorted(kind for kind in load_kinds() if kind != "vm")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--kinds", default=",".join(kinds), help="layer kinds (vm: add it by name)")
    parser.add_argument("--points", default=",".join(p for p in POINTS if p != "churn-mounted"))
    parser.add_argument("--signals", default=",".join(SIGNALS))
    parser.add_argument("--namespaces", default="host,private")
    parser.add_argument(
        "--churn", type=int, default=4, help="random-moment churn kills per pass and namespace"
    )
    parser.add_argument("--jobs", type=int, default=1, help="cases of a pass run side by side")
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp/layerbench-stress"))
    parser.add_argument("--json", type=Path, help="also write the outcomes here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("stress_recovery: needs root (mounts, loop devices)")
        return 2
    cases = [
        (kind, point, where, signame)
        for kind in args.kinds.split(",")
        for point in args.points.split(",")
        if point != "helper-started" or kind in _HELPERS
        for where in args.namespaces.split(",")
        for signame in args.signals.split(",")
    ]
    rows: dict[str, Outcome] = {}
    seconds: Counter[str] = Counter()
    passes: Counter[str] = Counter()
    rng = random.Random(20261201)
    started = time.monotonic()
    churn_names = [(where, kill) for where in args.namespaces.split(",") for kill in range(args.churn)]
    for number in range(args.passes):
        work: list[tuple[str, object]] = []
        for kind, point, where, signame in cases:
            work.append(
                (
                    f"{point} × {kind} × {where} × SIG{signame}",
                    (failpoint_case, args.scratch, kind, point, where, signame),
                )
            )
        for where, kill in churn_names:
            case_rng = random.Random(rng.random())
            work.append(
                (
                    f"churn, random moment × image × {where} × SIGKILL",
                    (churn_case, args.scratch, where, case_rng, number * args.churn + kill),
                )
            )
        for name, _ in work:
            rows.setdefault(name, Outcome())  # the table keeps the matrix's order
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {pool.submit(_timed, *call): name for name, call in work}
            for future in concurrent.futures.as_completed(futures):
                name = futures[future]
                outcome, took = future.result()
                _merge(rows, name, outcome)
                seconds[name] += took
                passes[name] += outcome.ok
        failed = sum(not o.ok for o in rows.values())
        print(
            f"pass {number + 1}/{args.passes}: {time.monotonic() - started:.0f} s, {failed} case(s) failing",
            file=sys.stderr,
            flush=True,
        )
        if args.json:
            # Written after every pass, so a stopped run still leaves what it proved.
            _write_json(args.json, rows, passes, seconds, number + 1)
    print(_table(rows, passes, seconds, args.passes))
    print(f"\n{len(rows)} cases x {args.passes} passes in {time.monotonic() - started:.0f} s")
    for name, outcome in rows.items():
        for problem in outcome.problems[:3]:
            print(f"- {name}: {problem}")
    return 0 if all(o.ok for o in rows.values()) else 1


def _timed(case, *args) -> tuple[Outcome, float]:  # type: ignore[no-untyped-def]
    began = time.monotonic()
    try:
        outcome = case(*args)
    except Exception as error:  # a broken case is a failed case, not a stopped pass
        outcome = Outcome()
        outcome.fail("harness", f"{type(error).__name__}: {error}")
    return outcome, time.monotonic() - began


def _write_json(
    path: Path, rows: dict[str, Outcome], passes: Counter[str], seconds: Counter[str], done: int
) -> None:
    cases = {
        name: {
            "ok": o.ok,
            "passed": passes[name],
            "seconds": round(seconds[name], 1),
            "tally": o.tally,
            "problems": o.problems,
        }
        for name, o in rows.items()
    }
    path.write_text(json.dumps({"passes_done": done, "cases": cases}, indent=1))


def _merge(rows: dict[str, Outcome], name: str, outcome: Outcome) -> None:
    row = rows.setdefault(name, Outcome())
    row.ok = row.ok and outcome.ok
    row.tally += outcome.tally
    row.problems += outcome.problems
    row.tally["runs"] += 1


def _table(rows: dict[str, Outcome], passes: Counter[str], seconds: Counter[str], count: int) -> str:
    header = ["case", "passed", "leftovers", "tracebacks", "lost runs", "resume failed", "other", "s/run"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    named = ("leftovers", "traceback", "lost runs", "resume")
    for name, outcome in rows.items():
        runs = outcome.tally["runs"]
        other = sum(v for k, v in outcome.tally.items() if k not in (*named, "runs"))
        cells = [
            name,
            f"{passes[name]}/{runs}",
            *(str(outcome.tally[k]) for k in named),
            str(other),
            f"{seconds[name] / runs:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
