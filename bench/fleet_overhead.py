#!/usr/bin/env python3
"""What a trial costs through a fleet, against the same trial run locally, side by side.

    python3 bench/fleet_overhead.py [--rounds 5] [--reps 10] [--root /var/tmp/layerbench-fo]

A one-host fleet on this machine, started by the real commands (`host head --bind
127.0.0.1`, `host join ... --bind 127.0.0.1`, Ray's files under --root), and the same
small plan (2 stacks x 1 workload, a 4 MiB synced write) run as `layerbench run PLAN` and
as `layerbench run PLAN --fleet HEAD`, each into its own SQLite file. Every round runs the
plan at 1 rep and at --reps reps on both sides, in a shuffled order; a side's cost per
trial in a round is the slope between its two sizes (so each command's fixed start-up,
Ray's connection included, drops out), and the fleet's overhead per trial is the fleet's
slope minus the local one, with a 95 % bootstrap interval over the rounds. The fixed
start-up difference (the intercepts) is printed too. Every run of every experiment is
checked to be there, ok.

Needs root (the stacks, the fleet's bind filter); everything it starts is stopped and
everything under --root removed at the end, also when it fails.
"""

import argparse
import contextlib
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from statistics import mean

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from layerbench.fleet import confine  # noqa: E402
from layerbench.store import Store  # noqa: E402

HOST = "overhead"
LOOPBACK = "127.0.0.1"
PLAN = """
name = "fleet-overhead"
baseline = "dir"
reps = {reps}
warmup = 0
order = "interleaved"
sentinel = false
rerun_disturbed = 0  # both sides run exactly the same trials

[stacks.dir]
layers = []

[stacks.tmpfs]
layers = [{{ kind = "tmpfs", size = "64M" }}]

[workloads.write]
kind = "command"
run = "sh -c 'dd if=/dev/zero of=out bs=1M count=4 conv=fsync status=none'"
"""
TRIALS_PER_REP = 2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def layerbench(*args: str, env: dict[str, str]) -> float:
    """Run the command; its wall time in seconds (it must succeed)."""
    begin = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "layerbench", *args], capture_output=True, text=True, env=env, timeout=1800
    )
    took = time.perf_counter() - begin
    if done.returncode != 0:
        raise SystemExit(f"layerbench {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return took


def ray_session_processes(marker: str) -> set[int]:
    """Processes whose command line names marker (this bench's Ray directory)."""
    found = set()
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.add(int(entry.name))
    return found - {os.getpid()}


@contextlib.contextmanager
def one_host_fleet(root: Path, env: dict[str, str]) -> Iterator[list[str]]:
    """The real head and host on loopback; the options `run --fleet` needs. Stopped, with
    everything Ray left under root, however this ends."""
    port = free_port()
    credentials = str(root / "credentials")
    with contextlib.ExitStack() as cleanup:

        def stop_fleet() -> None:
            unified = confine._unified_mount()
            for name in (f"head-{port}", f"host-{HOST}"):
                confine.Confinement(unified / confine.PARENT / name, LOOPBACK).stop()
            for pid in ray_session_processes(str(root / "ray")):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)

        cleanup.callback(stop_fleet)
        head = ("host", "head", "--bind", LOOPBACK, "--port", str(port), "--credentials", credentials)
        layerbench(*head, env=env)
        layerbench(
            "host", "join", f"{LOOPBACK}:{port}", "--name", HOST, "--scratch", str(root / "fleet-scratch"),
            "--bind", LOOPBACK, "--credentials", credentials, env=env,
        )  # fmt: skip
        yield ["--fleet", f"{LOOPBACK}:{port}", "--credentials", credentials]


def bootstrap(values: list[float], rng: random.Random, draws: int = 10000) -> tuple[float, float]:
    means = sorted(mean(rng.choices(values, k=len(values))) for _ in range(draws))
    return means[int(0.025 * draws)], means[int(0.975 * draws)]


def verify(db: Path, expected: dict[int, int]) -> None:
    """Each experiment of the file (in order) done, with its trials, all ok."""
    store = Store(db)
    for record, trials in zip(sorted(store.history(), key=lambda e: e.id), expected.values(), strict=True):
        runs = store.runs(record.id)
        assert record.status == "done" and len(runs) == trials, (db, record)
        assert all(r.ok for r in runs), [r.error for r in runs]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=10, help="the larger plan's reps (the smaller: 1)")
    parser.add_argument("--root", type=Path, default=Path("/var/tmp/layerbench-fo"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/fleet_overhead.py: needs root", file=sys.stderr)
        return 2
    root: Path = args.root
    if root.exists():
        print(f"bench/fleet_overhead.py: {root} exists; give another --root", file=sys.stderr)
        return 2
    rng = random.Random(1)
    # Ray's Unix sockets live under RAY_TMPDIR: a short path (at most 107 bytes each).
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_TMPDIR": str(root / "ray")}
    sizes = (1, args.reps)
    times: dict[tuple[str, int], list[float]] = {}
    expected: dict[str, dict[int, int]] = {"local": {}, "fleet": {}}
    started = time.perf_counter()
    with contextlib.ExitStack() as cleanup:
        root.mkdir(parents=True)
        cleanup.callback(shutil.rmtree, root, ignore_errors=True)
        for side in ("local", "fleet"):  # whatever a failed trial may have left in a scratch root
            cleanup.callback(
                subprocess.run,
                [sys.executable, "-m", "layerbench", "clean", "--scratch", str(root / f"{side}-scratch"),
                 "--db", str(root / "none.db")],
                env=env, capture_output=True,
            )  # fmt: skip
        plans = {}
        for reps in sizes:
            plans[reps] = root / f"plan-{reps}.toml"
            plans[reps].write_text(PLAN.format(reps=reps))
        fleet = cleanup.enter_context(one_host_fleet(root, env))
        sides = {
            "local": ["--scratch", str(root / "local-scratch"), "--db", str(root / "local.db")],
            "fleet": [*fleet, "--db", str(root / "fleet.db")],
        }
        layerbench("run", str(plans[1]), "--quiet", *sides["fleet"], env=env)  # Ray's workers, warm
        expected["fleet"][0] = TRIALS_PER_REP
        for round_ in range(args.rounds):
            order = [(side, reps) for side in sides for reps in sizes]
            rng.shuffle(order)
            for side, reps in order:
                took = layerbench("run", str(plans[reps]), "--quiet", *sides[side], env=env)
                times.setdefault((side, reps), []).append(took)
                expected[side][len(expected[side])] = reps * TRIALS_PER_REP
            print(f"# round {round_ + 1}/{args.rounds}: " + ", ".join(
                f"{side} {reps} rep(s) {times[(side, reps)][-1]:.2f} s" for side, reps in order
            ), file=sys.stderr)  # fmt: skip
        for side in sides:
            verify(root / f"{side}.db", expected[side])
    wall = time.perf_counter() - started
    small, large = sizes
    span = (large - small) * TRIALS_PER_REP
    per_trial = {
        side: [(b - a) / span for a, b in zip(times[(side, small)], times[(side, large)], strict=True)]
        for side in sides
    }
    fixed = {  # each command's seconds beyond its trials (start-up, connection, report)
        side: [
            t - small * TRIALS_PER_REP * s for t, s in zip(times[(side, small)], per_trial[side], strict=True)
        ]
        for side in sides
    }
    overhead = [f - loc for f, loc in zip(per_trial["fleet"], per_trial["local"], strict=True)]
    start_up = [f - loc for f, loc in zip(fixed["fleet"], fixed["local"], strict=True)]
    low, high = bootstrap(overhead, rng)
    start_low, start_high = bootstrap(start_up, rng)
    print(
        f"{args.rounds} rounds, plans of {small * TRIALS_PER_REP} and {large * TRIALS_PER_REP} trials "
        f"on each side, one host on this machine ({os.cpu_count()} CPUs), {wall:.0f} s; every run verified\n"
    )
    print("| figure | local | fleet | fleet - local [95% interval] |")
    print("|---|---|---|---|")
    print(
        f"| seconds per trial | {np.median(per_trial['local']):.3f} | {np.median(per_trial['fleet']):.3f} |"
        f" {mean(overhead):+.3f} [{low:+.3f} to {high:+.3f}] |"
    )
    print(
        f"| fixed seconds per command | {np.median(fixed['local']):.2f} | {np.median(fixed['fleet']):.2f} |"
        f" {mean(start_up):+.2f} [{start_low:+.2f} to {start_high:+.2f}] |"
    )
    for reps in sizes:
        print(
            f"| whole command, {reps * TRIALS_PER_REP} trials, s | {np.median(times[('local', reps)]):.2f} |"
            f" {np.median(times[('fleet', reps)]):.2f} | |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
