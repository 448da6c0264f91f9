"""The results browser at scale: a store of many experiments (2,000 and 200,000 runs by
default), written with the fake executor, then `layerbench serve` over it, asked for its
pages again and again; prints each page's answer times (median, p95) and the server's peak
memory.

    python3 bench/serve_scale.py                                   # SQLite, in --scratch
    python3 bench/serve_scale.py --db postgresql://user@host/db    # an empty PostgreSQL database
    python3 bench/serve_scale.py --postgres                        # a throwaway PostgreSQL cluster
    python3 bench/serve_scale.py --experiments 200 --requests 20   # a quick look
    python3 bench/serve_scale.py --after 20                        # once the server's warm-up is done

The store is written once and kept (`--keep`) or removed at the end; a store that already
holds the experiments (the same --db) is reused as it is."""

import argparse
import contextlib
import math
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from layerbench.executors.fake import FakeExecutor
from layerbench.experiment import Experiment
from layerbench.plan import parse_plan
from layerbench.plan.schedule import Trial
from layerbench.store import Store, locate

STACKS = ("disk", "bind", "image", "tmpfs")
WORKLOADS = ("extract", "stream-write", "metadata", "fio-read", "fio-write")
LIMITS_MS = {"experiments": 300, "trend": 300, "experiment": 500}  # p95, issue 28
MEMORY_LIMIT_MIB = 300


def plan_text(name: str, reps: int) -> str:
    stacks = "".join(f"[stacks.{s}]\nlayers = []\n" for s in STACKS)
    workloads = "".join(f'[workloads.{w}]\nkind = "command"\nrun = "true"\n' for w in WORKLOADS)
    return f'name = "{name}"\nreps = {reps}\nwarmup = 0\nbaseline = "disk"\n{stacks}{workloads}'


def populate(db: str, experiments: int, plans: int, reps: int) -> float:
    """Experiments over `plans` plans, each stack a little slower from some experiment on (a
    step the trends page finds). Returns the seconds it took."""
    began = time.monotonic()
    store = Store(locate(db))
    try:
        have = len(store.history())
        for number in range(have, experiments):
            plan = parse_plan(plan_text(f"scale-{number % plans}", reps), f"scale-{number % plans}.toml")
            later = number >= experiments // 2

            def script(trial: Trial, number: int = number, later: bool = later) -> dict[str, object]:
                noise = random.Random(number * 100_000 + trial.index).gauss(0, 0.03)
                cost = (
                    1.0 + 0.1 * STACKS.index(trial.stack) + (0.05 if later and trial.stack == "bind" else 0)
                )
                return {"wall_s": cost * math.exp(noise), "user_s": 0.1, "sys_s": 0.3, "cpu_pct": 40.0}

            experiment = Experiment(plan, store, FakeExecutor(script), seed=number)
            experiment.prepare([])
            experiment.run()
            if number % 100 == 99:
                print(f"  {number + 1} experiments written, {time.monotonic() - began:.0f} s", flush=True)
    finally:
        store.close()
    return time.monotonic() - began


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str) -> float:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as answer:
        answer.read()
        assert answer.status == 200, (url, answer.status)
    return (time.perf_counter() - began) * 1000


def _peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(db: str, experiments: int, requests: int, after: float) -> list[tuple[str, float, float, int]]:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "layerbench", "serve", "--db", db, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _get(base + "/experiments")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    said = server.stderr.read() if server.stderr else ""
                    raise SystemExit(f"the server did not start: {said}") from None
                time.sleep(0.2)
        time.sleep(after)  # the server computes the trends of its plans as it starts
        rng = random.Random(1)
        pages = {
            "experiments": lambda: f"{base}/experiments",
            "trend": lambda: f"{base}/trends?plan=scale-{rng.randrange(10)}",
            "experiment": lambda: f"{base}/experiments/{rng.randrange(1, experiments + 1)}",
        }
        found = []
        for name, url in pages.items():
            times = sorted(_get(url()) for _ in range(requests))
            p95 = times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)]
            found.append((name, times[len(times) // 2], p95, requests))
        found.append(("server peak memory (MiB)", _peak_mib(server.pid), float("nan"), 0))
        return found
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", help="a store (path or postgresql:// URL); default: a file in --scratch")
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp/layerbench-serve-scale"))
    parser.add_argument("--experiments", type=int, default=2000)
    parser.add_argument("--plans", type=int, default=10)
    parser.add_argument("--reps", type=int, default=5, help="runs per experiment: 20 x reps")
    parser.add_argument("--requests", type=int, default=40, help="requests per page")
    parser.add_argument(
        "--after", type=float, default=0.0, help="seconds to wait after the server first answers"
    )
    parser.add_argument("--keep", action="store_true", help="keep the SQLite store in --scratch")
    parser.add_argument(
        "--postgres", action="store_true", help="a PostgreSQL cluster of its own (Debian's), removed after"
    )
    args = parser.parse_args()
    created = not args.scratch.exists()
    args.scratch.mkdir(parents=True, exist_ok=True)
    try:
        with contextlib.ExitStack() as resources:
            if args.postgres:
                import postgres  # tests/postgres.py: initdb, pg_ctl, a Unix socket

                if reason := postgres.missing():
                    raise SystemExit(f"--postgres: {reason}")
                server = resources.enter_context(postgres.cluster(args.scratch))
                args.db = server.create_database("scale")
            return _bench(args)
    finally:
        if created and not args.keep:  # the throwaway cluster's directory too
            shutil.rmtree(args.scratch, ignore_errors=True)


def _bench(args: argparse.Namespace) -> int:
    db = args.db or str(args.scratch / "scale.db")
    try:
        took = populate(db, args.experiments, args.plans, args.reps)
        runs = args.experiments * len(STACKS) * len(WORKLOADS) * args.reps
        print(f"store {db}: {args.experiments} experiments, {runs} runs ({took:.0f} s to write)")
        print(f"asked from {args.after:g} s after the server first answered")
        print("| page | median ms | p95 ms | requests | goal (p95) | met |")
        print("|---|---|---|---|---|---|")
        for name, median, p95, count in measure(db, args.experiments, args.requests, args.after):
            if count == 0:
                met = "yes" if median <= MEMORY_LIMIT_MIB else "NO"
                print(f"| {name} | {median:.0f} | - | - | <= {MEMORY_LIMIT_MIB} MiB | {met} |")
                continue
            met = "yes" if p95 <= LIMITS_MS[name] else "NO"
            print(f"| {name} | {median:.0f} | {p95:.0f} | {count} | <= {LIMITS_MS[name]} ms | {met} |")
    finally:
        if not args.keep and args.db is None:
            shutil.rmtree(args.scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
