#!/usr/bin/env python3
"""What free page reporting costs a run, and what holding memory warm (warm_memory.py) takes
off it: 1 GiB written with dd into a tmpfs that already holds 1.5 GB (the default
experiment's stream-write on tmpfs), after the memory sat idle, with and without the hold.

    python3 bench/warm_memory.py [--rounds 5] [--idle 10] [--scratch /var/tmp/layerbench-warm]

Each round runs both sides in shuffled order; a side frees the previous tmpfs, holds (or
not) 1.1 GiB through `warm_memory.held`, fills the new tmpfs, drops the caches, idles, lets
go of the hold and times dd. Prints a Markdown table: each side's median and range, the ratio
held / not held with its 95 % bootstrap interval over the paired rounds, and the hold's cost.
Needs root; exits 2 where the kernel does not report free pages (nothing to measure).
"""

import argparse
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from run import ratio_interval  # noqa: E402

from layerbench import kernelstats, measure, warm_memory  # noqa: E402

RUN_BYTES = 1 << 30


def one(mount: Path, hold: bool, idle: float) -> tuple[float, float]:
    """(the timed dd's seconds, the hold's seconds)"""
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3G", "layerbench-warm", str(mount)], check=True)
    try:
        with warm_memory.held(RUN_BYTES if hold else 0) as held:
            fill = ["dd", "if=/dev/zero", f"of={mount / 'fill'}", "bs=1M", "count=1500", "status=none"]
            subprocess.run(fill, check=True)
            measure.drop_caches()
            time.sleep(idle)
            held.release()
            began = time.monotonic()
            run = ["dd", "if=/dev/zero", f"of={mount / 'run'}", "bs=1M", "count=1024", "conv=fsync"]
            subprocess.run([*run, "status=none"], check=True)
            return time.monotonic() - began, held.seconds
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds memory sits free before the run")
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp/layerbench-warm"))
    args = parser.parse_args()
    if kernelstats.read_reported_kib() is None:
        print("this kernel does not report free pages to a hypervisor: nothing to measure", file=sys.stderr)
        return 2
    mount = args.scratch / "tmpfs"
    mount.mkdir(parents=True, exist_ok=True)
    times: dict[bool, list[float]] = {True: [], False: []}
    costs: list[float] = []
    try:
        for _ in range(args.rounds + 1):  # the first round warms up and is dropped
            sides = [True, False]
            random.shuffle(sides)
            for hold in sides:
                run_s, hold_s = one(mount, hold, args.idle)
                times[hold].append(run_s)
                if hold:
                    costs.append(hold_s)
    finally:
        shutil.rmtree(args.scratch, ignore_errors=True)
    held, bare = times[True][1:], times[False][1:]
    low, high = ratio_interval(held, bare)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"warm memory, {args.rounds} rounds, {args.idle:g} s idle, {stamp}")
    print()
    print("| 1 GiB dd into a tmpfs holding 1.5 GB | held | not held | ratio held / not held | hold's cost |")
    print("|---|---|---|---|---|")
    print(
        f"| run time (s) | {median(held):.3f} ({min(held):.3f}-{max(held):.3f}) "
        f"| {median(bare):.3f} ({min(bare):.3f}-{max(bare):.3f}) "
        f"| {median(held) / median(bare):.3f} [{low:.3f}-{high:.3f}] | {median(costs[1:]):.3f} s |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
