#!/usr/bin/env python3
"""What free page reporting costs a run, and what holding memory warm (warm_memory.py) takes
off it: 1 GiB written with dd into a tmpfs that already holds 1.5 GB (the default
experiment's stream-write on tmpfs) and into the page cache of the scratch root's file
system (then fsync'd), after the memory sat idle, with and without the hold.

    python3 bench/warm_memory.py [--rounds 5] [--idle 10] [--scratch /var/tmp/layerbench-warm]

Each round runs every side in shuffled order; a side holds (or not) what the run takes
through `warm_memory.held`, fills the tmpfs (tmpfs), drops the caches, idles, lets go of the
hold and times dd. Prints a Markdown table: each side's median and range, the ratio held /
not held with its 95 % bootstrap interval over the paired rounds, and the hold's cost.
Needs root; exits 2 where the kernel does not report free pages (nothing to measure).
"""

import argparse
import math
import os
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

from run import ALPHA, ratio_interval  # noqa: E402

from layerbench.observe import kernelstats, measure, warm_memory  # noqa: E402

RUN_BYTES = 1 << 30


def one(where: str, scratch: Path, hold: bool, idle: float) -> tuple[float, float]:
    """(the timed dd's seconds, the hold's seconds)"""
    mount = scratch / "tmpfs"
    if where == "tmpfs":
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3G", "layerbench-warm", str(mount)], check=True)
    target = mount if where == "tmpfs" else scratch / "disk"
    target.mkdir(exist_ok=True)
    try:
        with warm_memory.held(RUN_BYTES if hold else 0, huge=where != "tmpfs") as held:
            if where == "tmpfs":
                fill = ["dd", "if=/dev/zero", f"of={target / 'fill'}", "bs=1M", "count=1500", "status=none"]
                subprocess.run(fill, check=True)
            measure.drop_caches()
            time.sleep(idle)
            held.release()
            began = time.monotonic()
            run = ["dd", "if=/dev/zero", f"of={target / 'run'}", "bs=1M", "count=1024", "conv=fsync"]
            subprocess.run([*run, "status=none"], check=True)
            return time.monotonic() - began, held.seconds
    finally:
        if where == "tmpfs":
            subprocess.run(["umount", str(mount)], check=True)
        else:
            (target / "run").unlink()
            os.sync()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds memory sits free before the run")
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp/layerbench-warm"))
    args = parser.parse_args()
    if kernelstats.read_reported_kib() is None:
        print("this kernel does not report free pages to a hypervisor: nothing to measure", file=sys.stderr)
        return 2
    (args.scratch / "tmpfs").mkdir(parents=True, exist_ok=True)
    sides = [(where, hold) for where in ("tmpfs", "disk") for hold in (True, False)]
    times: dict[tuple[str, bool], list[float]] = {side: [] for side in sides}
    costs: dict[str, list[float]] = {"tmpfs": [], "disk": []}
    try:
        for index in range(args.rounds + 1):  # the first round warms up and is dropped
            for where, hold in random.sample(sides, len(sides)):
                run_s, hold_s = one(where, args.scratch, hold, args.idle)
                if index:
                    times[(where, hold)].append(run_s)
                    if hold:
                        costs[where].append(hold_s)
    finally:
        shutil.rmtree(args.scratch, ignore_errors=True)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"warm memory, {args.rounds} rounds, {args.idle:g} s idle, {stamp}")
    print()
    print("| 1 GiB dd, conv=fsync | held | not held | ratio held / not held | hold's cost |")
    print("|---|---|---|---|---|")
    for where, what in (("tmpfs", "into a tmpfs holding 1.5 GB"), ("disk", "into the scratch file system")):
        held, bare = times[(where, True)], times[(where, False)]
        ratio, low, high, level = ratio_interval(held, bare, ALPHA)
        interval = f" [{low:.3f}-{high:.3f}, {level:.0%}]" if not math.isnan(low) else " (too few rounds)"
        print(
            f"| {what} | {median(held):.3f} s ({min(held):.3f}-{max(held):.3f}) "
            f"| {median(bare):.3f} s ({min(bare):.3f}-{max(bare):.3f}) "
            f"| {ratio:.3f}{interval} | {median(costs[where]):.2f} s |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
