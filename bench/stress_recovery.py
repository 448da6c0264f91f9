#!/usr/bin/env python3
"""The crash matrix, many times: kill a run everywhere it can be killed, then check that
`clean` leaves nothing and `run --resume` completes.

    python3 bench/stress_recovery.py [--passes 20] [--kinds dir,image,...] [--points ...]
                                     [--signals KILL,TERM,INT,HUP] [--namespaces host,private]
                                     [--churn 4] [--agent-kinds ...] [--agent-signals KILL,TERM]
                                     [--store-losses 3] [--only matrix,churn,agent,store]
                                     [--jobs 1] [--scratch /var/tmp/layerbench-stress]

Each case is one failpoint x one layer kind x one mount namespace choice x one signal: a
two-trial plan whose stack is that layer kind runs with LAYERBENCH_STOP_AT=POINT, freezes
itself there, gets the signal (then SIGCONT, so a handler runs), and must end as the
signal says (SIGKILL: killed; the others: exit 130). Then `layerbench clean` must exit 0
with no traceback and leave nothing of ours (mounts, loop devices, FUSE daemons, qemu,
control groups), the results file must pass `PRAGMA integrity_check` and keep every run
stored before the signal, and `run --resume` must complete the experiment with every
trial exactly once. Churn cases kill a churn run with SIGKILL at a random moment instead
of a failpoint (the race of a mount(8) in flight). `image-queue` is the image layer with a
block-queue scheduler and a sector size: clean must also put the loop device's scheduler back.

Agent cases are a fleet host's agent (`python3 -m layerbench.fleet.agent`, given a pickled
request for one trial on its stdin, as the fleet's Ray task starts it) stopped at a failpoint:
SIGKILL, then `layerbench clean` of its scratch root must leave nothing; SIGTERM (its worker
went away), it must tear down by itself and answer that it stopped. Then the trial is asked
of a new agent and must succeed.

Store cases are a `layerbench run` into a PostgreSQL database (a throwaway cluster of the
case's own, on a Unix socket) whose server is stopped (`pg_ctl stop -m immediate`) while
trials run: once at a random moment after the first run was stored, once during the third
trial's timed run (deterministic). layerbench must exit 1 with one line, no traceback,
nothing left; with the server back, every run stored before the stop is there with all its
samples (none half-written), `clean` marks the experiment interrupted with a reason, and
`run --resume` completes it with every trial exactly once.

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
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import postgres  # noqa: E402
import psycopg  # noqa: E402
from helpers import (  # noqa: E402
    agent_answers,
    leftovers,
    leftovers_after,
    other_loop_scheduler,
    start_agent,
    stopped_agent,
)

from layerbench.core.failpoints import POINTS  # noqa: E402
from layerbench.fleet.requests import Answer, PlanSource, Request  # noqa: E402
from layerbench.linux import procfs  # noqa: E402
from layerbench.plan import parse_plan  # noqa: E402
from layerbench.plan.schedule import schedule  # noqa: E402
from layerbench.stacks.base import load_kinds  # noqa: E402

SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "INT": signal.SIGINT, "HUP": signal.SIGHUP}
_LAYER = {
    "tmpfs": '{ kind = "tmpfs", size = "64M" }',
    "image": '{ kind = "image", size = "64M" }',
    # A scheduler the loop device offers besides its own (bfq where the kernel has it).
    "image-queue": '{ kind = "image", size = "64M", scheduler = "%s", sector_size = 4096 }'
    % (other_loop_scheduler() or "none"),
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
# Stacks that are a layer kind with options the kind's own row leaves out.
_VARIANTS = ("image-queue",)
TRIALS = 2
STORE_TRIALS = 6  # enough that the server can go away with runs stored and trials to come


@dataclass
class Outcome:
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    tally: Counter[str] = field(default_factory=Counter)

    def fail(self, what: str, detail: str) -> None:
        self.ok = False
        self.tally[what] += 1
        self.problems.append(f"{what}: {detail[:300]}")


def _plan(kind: str, workload: str, reps: int = TRIALS) -> str:
    layer = _LAYER.get(kind, f'{{ kind = "{kind}" }}')
    return (
        f'name = "stress"\nreps = {reps}\nwarmup = 0\nseed = 1\nrerun_disturbed = 0\n'
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


def _stopped(child: "subprocess.Popen[Any]", timeout: float = 300) -> bool:
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


def _clean(outcome: Outcome, scratch: Path, db: str) -> None:
    """`layerbench clean` after a case: it must succeed, say no traceback, and leave nothing."""
    done = _cli("clean", "--scratch", str(scratch), "--db", db)
    if "Traceback" in done.stdout + done.stderr:
        outcome.fail("traceback", done.stderr)
    if done.returncode != 0:
        outcome.fail("clean failed", done.stderr or done.stdout)
    if left := leftovers_after(scratch, 10):
        outcome.fail("leftovers", "; ".join(left))


def _after(outcome: Outcome, scratch: Path, db: Path, kept: list[int], extra: list[str]) -> None:
    """clean, then the checks every case shares, then resume."""
    _clean(outcome, scratch, str(db))
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
    plan.write_text(_plan(kind, _workload_of(kind)))
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
    queues = _queue_settings(scratch)
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
    _check_queues(outcome, queues, scratch)
    return outcome


def _queue_settings(scratch: Path) -> list[tuple[Path, str]]:
    """The block-queue settings the frozen run has made (journaled): (file, the old value)."""
    journal = scratch / "journal.jsonl"
    if not journal.exists():
        return []
    found = []
    for line in journal.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError, KeyError):
            entry = json.loads(line)["add"]
            if entry["kind"] == "setting":
                found.append((Path(entry["target"]), str(entry["old"])))
    return found


def _check_queues(outcome: Outcome, queues: list[tuple[Path, str]], scratch: Path) -> None:
    """A scheduler a killed run set on its loop device is a leftover too: the next user of the
    device would get it. Only a device no other case holds now can be judged (with --jobs, a
    case beside this one may have taken the device and set its own)."""
    for queue, old in queues:
        backing = queue.parent.parent / "loop" / "backing_file"
        if _held_by_another(backing, scratch):
            continue
        value = queue.read_text()
        if f"[{old}]" not in value and not _held_by_another(backing, scratch):
            outcome.fail("leftovers", f"{queue} is {value.strip()!r}, not put back to {old}")


def _held_by_another(backing: Path, scratch: Path) -> bool:
    try:
        return not backing.read_text().strip().startswith(str(scratch))
    except OSError:
        return False  # detached: nobody holds it


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


def _agent_request(kind: str, scratch: Path) -> Request:
    """What the fleet's head sends a host for the plan's first trial."""
    text = _plan(kind, _workload_of(kind))
    plan = parse_plan(text, "stress-agent.toml")
    first = schedule(plan, 1)[0]
    return Request("run", host="stress", scratch=str(scratch), plan=PlanSource.of(plan), trial=first,
                   experiment_id=1)  # fmt: skip


def _answer_of(child: subprocess.Popen[bytes], outcome: Outcome) -> Answer | None:
    """Wait for the agent; its answer to the trial, or None (said in the outcome) if it gave none."""
    stdout, stderr = child.communicate(timeout=300)
    errors = stderr.decode(errors="replace")
    if "Traceback" in errors:
        outcome.fail("traceback", errors)
    answers = agent_answers(stdout) if stdout else []
    if child.returncode != 0 or len(answers) < 2:
        said = answers[0].error if answers else errors.strip()[-200:]
        outcome.fail("exit status", f"agent exited {child.returncode}: {said}")
        return None
    answer: Answer = answers[-1]
    return answer


def agent_case(root: Path, kind: str, point: str, signame: str) -> Outcome:
    """A fleet host's agent stopped at a failpoint of its trial, then the trial asked again."""
    outcome = Outcome()
    case = root / f"agent-{kind}-{point}-{signame}"
    scratch = case / "scratch"
    case.mkdir(parents=True, exist_ok=True)
    request = _agent_request(kind, scratch)
    child = start_agent([request], scratch, {"LAYERBENCH_STOP_AT": point})
    try:
        agent: int | None = stopped_agent(child, timeout=300)
    except AssertionError:
        agent = None
    stopped = agent is not None
    queues = _queue_settings(scratch)
    if not stopped:
        outcome.fail("never stopped", f"agent exited {child.poll()}")
    else:
        assert agent is not None
        os.kill(agent, SIGNALS[signame])
        if signame != "KILL":
            os.kill(agent, signal.SIGCONT)
    if signame == "KILL" or not stopped:
        child.communicate(timeout=300)
    else:
        # Told to stop (its worker went away): it tears down by itself and says so.
        answer = _answer_of(child, outcome)
        # A stop at `teardown` lands once the run is measured: an answer with the trial's run
        # is as right as "stopped" there, as long as nothing is left.
        if answer is not None and (answer.ok or "stopped" not in answer.error) and point != "teardown":
            outcome.fail("answer", f"not a stopped trial: ok={answer.ok} {answer.error!r}")
        if left := leftovers_after(scratch, 10):
            outcome.fail("leftovers", "before clean: " + "; ".join(left))
    _clean(outcome, scratch, str(case / "none.db"))
    _check_queues(outcome, queues, scratch)
    # The head asks again (a resume): a new agent on the same scratch root runs the trial.
    again = _answer_of(start_agent([request], scratch), outcome)
    if again is not None and not (again.ok and again.value.counters.status == "ok"):
        error = again.error if not again.ok else again.value.counters.error
        outcome.fail("resume", f"the trial again: {error}")
    if left := leftovers_after(scratch, 10):
        outcome.fail("leftovers", "after the trial again: " + "; ".join(left))
    return outcome


def _store_runs(server: "postgres.Cluster", database: str) -> list[tuple[int, int, int | None]]:
    """(trial, samples stored, samples the run says it took) of every stored run."""
    with psycopg.connect(host=str(server.socket), user=postgres.USER, dbname=database) as db:
        rows = db.execute(
            "SELECT r.trial, (SELECT count(*) FROM samples s WHERE s.run_id = r.id), r.facts_json "
            "FROM runs r ORDER BY r.trial"
        ).fetchall()
    return [(trial, count, json.loads(facts).get("sampler", {}).get("count")) for trial, count, facts in rows]


def _stored_trials(server: "postgres.Cluster", database: str) -> list[int]:
    try:
        return [trial for trial, _, _ in _store_runs(server, database)]
    except psycopg.Error:
        return []


def _experiment_state(server: "postgres.Cluster", database: str) -> tuple[str, str | None]:
    with psycopg.connect(host=str(server.socket), user=postgres.USER, dbname=database) as db:
        status, reason = db.execute("SELECT status, status_reason FROM experiments").fetchone() or ("", None)
    return status, reason


def store_case(root: Path, moment: str, rng: random.Random, number: int = 0) -> Outcome:
    """A run into PostgreSQL whose server goes away while its trials run (see the docstring)."""
    outcome = Outcome()
    case = root / f"store-{moment}-{number}"
    scratch, plan, marker = case / "scratch", case / "plan.toml", case / "trials-started"
    case.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    with postgres.cluster(case) as server:
        url = server.create_database("results")
        stop = " ".join(
            ["runuser", "-u", postgres.USER, "--", str(postgres.BIN / "pg_ctl"), "-D", str(server.data),
             "-m", "immediate", "-w", "stop"]
        )  # fmt: skip
        if moment == "timed-run":
            # The workload itself stops the server, in the third trial's timed run: two runs
            # are stored, the third is measured and cannot be.
            workload = (
                f'kind = "command"\nrun = "sh -c \'echo >> {marker}; '
                f"[ $(wc -l < {marker}) -ne 3 ] || {stop} >/dev/null'\""
            )
        else:
            workload = 'kind = "stream-write"\nsize = "4M"'
        plan.write_text(_plan("image", workload, reps=STORE_TRIALS))
        child = _start(["run", str(plan), "--db", url, "--scratch", str(scratch), "--quiet"], {})
        kept: list[int] = []
        if moment == "random":
            deadline = time.monotonic() + 120
            while (
                not _stored_trials(server, "results") and time.monotonic() < deadline and child.poll() is None
            ):
                time.sleep(0.05)
            time.sleep(rng.uniform(0, 2.0))
            kept = _stored_trials(server, "results")
            server.stop()
        _, stderr = child.communicate(timeout=600)
        if moment == "timed-run":
            kept = [0, 1]
        _check_one_line_exit(outcome, child.returncode, stderr, finished=len(kept) == STORE_TRIALS)
        if left := leftovers_after(scratch, 10):
            outcome.fail("leftovers", "before clean: " + "; ".join(left))
        server.restart()
        stored = _store_runs(server, "results")
        if lost := sorted(set(kept) - {trial for trial, _, _ in stored}):
            outcome.fail("lost runs", f"trials {lost}")
        if half := [(t, n, taken) for t, n, taken in stored if n != taken]:
            outcome.fail("half-written", f"(trial, samples stored, samples taken): {half}")
        _clean(outcome, scratch, url)
        status, reason = _experiment_state(server, "results")
        if len(stored) < STORE_TRIALS and (status != "interrupted" or not reason):
            outcome.fail("not marked", f"status {status!r}, reason {reason!r}")
        resumed = _cli("run", "--resume", "1", "--db", url, "--scratch", str(scratch), "--quiet")
        if "Traceback" in resumed.stdout + resumed.stderr:
            outcome.fail("traceback", resumed.stderr)
        trials = _stored_trials(server, "results")
        finished_before = len(stored) == STORE_TRIALS and "nothing to resume" in resumed.stderr
        if not (resumed.returncode == 0 or finished_before) or trials != list(range(STORE_TRIALS)):
            last = resumed.stderr.strip().splitlines()[-1:]
            outcome.fail("resume", f"{last[0] if last else resumed.returncode}; trials {trials}")
        elif _experiment_state(server, "results")[0] != "done":
            outcome.fail("resume", f"resumed, but {_experiment_state(server, 'results')}")
        if left := leftovers_after(scratch, 10):
            outcome.fail("leftovers", "after resume: " + "; ".join(left))
    return outcome


def _check_one_line_exit(outcome: Outcome, status: int, stderr: str, *, finished: bool) -> None:
    """A lost store is exit 1 and one line of layerbench's own (the noise warnings of doctor
    may precede it), never a traceback; exit 0 only if the run ended before the stop."""
    if "Traceback" in stderr:
        outcome.fail("traceback", stderr)
    said = [line for line in stderr.splitlines() if line.startswith("layerbench:")]
    if status == 0 and finished:
        return
    if status != 1:
        outcome.fail("exit status", f"{status}, not 1: {stderr.strip()[-300:]}")
    elif len(said) != 1 or "went away" not in said[0]:
        outcome.fail("message", f"not one line saying the store went away: {stderr.strip()[-300:]}")


def _workload_of(kind: str) -> str:
    return 'kind = "read-tree"' if kind in _READ_ONLY else 'kind = "stream-write"\nsize = "4M"'


def main() -> int:
    here = [name for name, kind in load_kinds().items() if name != "vm" and not kind.only_in_a_guest_here()]
    kinds = sorted([*here, *_VARIANTS])
    families = ("matrix", "churn", "agent", "store")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--kinds", default=",".join(kinds), help="layer kinds (vm: add it by name)")
    parser.add_argument("--points", default=",".join(p for p in POINTS if p != "churn-mounted"))
    parser.add_argument("--signals", default=",".join(SIGNALS))
    parser.add_argument("--namespaces", default="host,private")
    parser.add_argument(
        "--churn", type=int, default=4, help="random-moment churn kills per pass and namespace"
    )
    parser.add_argument(
        "--agent-kinds", default="image-queue,limits,fuse,sshfs", help="layer kinds of the agent cases"
    )
    parser.add_argument("--agent-signals", default="KILL,TERM")
    parser.add_argument("--store-losses", type=int, default=3, help="random-moment PostgreSQL stops per pass")
    parser.add_argument(
        "--only", default=",".join(families), help=f"the families of cases to run: {', '.join(families)}"
    )
    parser.add_argument("--jobs", type=int, default=1, help="cases of a pass run side by side")
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp/layerbench-stress"))
    parser.add_argument("--json", type=Path, help="also write the outcomes here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("stress_recovery: needs root (mounts, loop devices)")
        return 2
    chosen = set(args.only.split(","))
    if unknown := chosen - set(families):
        parser.error(f"--only: no family {', '.join(sorted(unknown))}")
    if "store" in chosen and (reason := postgres.missing()):
        print(f"stress_recovery: no store cases: {reason}")
        return 2
    points = args.points.split(",")
    cases = [
        (kind, point, where, signame)
        for kind in args.kinds.split(",")
        for point in points
        if point != "helper-started" or kind in _HELPERS
        for where in args.namespaces.split(",")
        for signame in args.signals.split(",")
    ]
    agent_cases = [
        (kind, point, signame)
        for kind in args.agent_kinds.split(",")
        for point in points
        if point != "helper-started" or kind in _HELPERS
        for signame in args.agent_signals.split(",")
    ]
    rows: dict[str, Outcome] = {}
    seconds: defaultdict[str, float] = defaultdict(float)
    passes: Counter[str] = Counter()
    rng = random.Random(20261201)
    started = time.monotonic()
    churn_names = [(where, kill) for where in args.namespaces.split(",") for kill in range(args.churn)]
    for number in range(args.passes):
        work: list[tuple[str, tuple[Any, ...]]] = []
        for kind, point, where, signame in cases if "matrix" in chosen else []:
            work.append(
                (
                    f"{point} × {kind} × {where} × SIG{signame}",
                    (failpoint_case, args.scratch, kind, point, where, signame),
                )
            )
        for where, kill in churn_names if "churn" in chosen else []:
            case_rng = random.Random(rng.random())
            work.append(
                (
                    f"churn, random moment × image × {where} × SIGKILL",
                    (churn_case, args.scratch, where, case_rng, number * args.churn + kill),
                )
            )
        for kind, point, signame in agent_cases if "agent" in chosen else []:
            work.append(
                (
                    f"fleet agent: {point} × {kind} × SIG{signame}",
                    (agent_case, args.scratch, kind, point, signame),
                )
            )
        if "store" in chosen:
            work.append(
                (
                    "PostgreSQL stopped: 3rd trial's timed run × image",
                    (store_case, args.scratch, "timed-run", random.Random(0), number),
                )
            )
            for loss in range(args.store_losses):
                case_rng = random.Random(rng.random())
                work.append(
                    (
                        "PostgreSQL stopped: random moment × image",
                        (store_case, args.scratch, "random", case_rng, number * args.store_losses + loss),
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


def _timed(case: Callable[..., Outcome], *args: Any) -> tuple[Outcome, float]:
    began = time.monotonic()
    try:
        outcome = case(*args)
    except Exception as error:  # a broken case is a failed case, not a stopped pass
        outcome = Outcome()
        outcome.fail("harness", f"{type(error).__name__}: {error}")
    return outcome, time.monotonic() - began


def _write_json(
    path: Path, rows: dict[str, Outcome], passes: Counter[str], seconds: dict[str, float], done: int
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


def _table(rows: dict[str, Outcome], passes: Counter[str], seconds: dict[str, float], count: int) -> str:
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
