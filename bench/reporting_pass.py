#!/usr/bin/env python3
"""What a pass of free page reporting in the timed run costs it, and what waiting for the pass
first (warm_memory.wait_for_reporting_pass) takes off: 512M written with `dd conv=fsync` onto
ext4 on a memory-backed loop device (bench/run.py's, so that no disk's noise is in the way),
rounds a second apart, the run's memory held warm as a trial holds it, then let go of at
once or after waiting for the pass.

    python3 bench/reporting_pass.py [--rounds 20] [--pause 1] [--scratch /var/tmp/layerbench-pass]

Each round runs both sides in shuffled order. Prints a Markdown table: each side's median and
range, its rounds slower than 1.3 times the fastest of all, the ratio wait / at once with its
interval over the paired rounds, and the wait's median. Needs root; exits 2 where the kernel
does not report free pages (nothing to measure).
"""

import argparse
import math
import random
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from run import ALPHA, memory_device, ratio_interval  # noqa: E402

from layerbench.observe import kernelstats, measure, warm_memory  # noqa: E402

RUN_BYTES = 512 << 20


def one(top: Path, wait: bool) -> tuple[float, float]:
    """(the timed dd's seconds, the seconds waited for the pass)"""
    target = top / "run"
    try:
        with warm_memory.held(RUN_BYTES) as held:
            measure.drop_caches()
            waited = warm_memory.wait_for_reporting_pass(held).waited_s if wait else 0.0
            held.release()
            began = time.monotonic()
            run = ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={RUN_BYTES >> 20}", "conv=fsync"]
            subprocess.run([*run, "status=none"], check=True)
            return time.monotonic() - began, waited
    finally:
        target.unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between runs")
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp/layerbench-pass"))
    args = parser.parse_args()
    if kernelstats.read_reported_kib() is None:
        print("this kernel does not report free pages to a hypervisor: nothing to measure", file=sys.stderr)
        return 2
    times: dict[bool, list[float]] = {True: [], False: []}
    waits: list[float] = []
    args.scratch.mkdir(parents=True, exist_ok=True)
    try:
        with memory_device(args.scratch, "2G") as top:
            for index in range(args.rounds + 1):  # the first round warms up and is dropped
                for wait in random.sample([True, False], 2):
                    time.sleep(args.pause)
                    run_s, waited = one(top, wait)
                    if index:
                        times[wait].append(run_s)
                        if wait:
                            waits.append(waited)
    finally:
        args.scratch.rmdir()
    fastest = min(times[True] + times[False])
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"free page reporting's pass, {args.rounds} rounds, {args.pause:g} s apart, {stamp}")
    print()
    print("| 512M dd, conv=fsync, held warm | let go after the pass | let go at once | ratio | waited |")
    print("|---|---|---|---|---|")
    ratio, low, high, level = ratio_interval(times[True], times[False], ALPHA)
    interval = f" [{low:.3f}-{high:.3f}, {level:.0%}]" if not math.isnan(low) else " (too few rounds)"
    cells = [
        f"{median(t):.3f} s ({min(t):.3f}-{max(t):.3f}), {sum(x > 1.3 * fastest for x in t)} slow"
        for t in (times[True], times[False])
    ]
    print(
        f"| onto ext4 on a memory-backed loop device | {cells[0]} | {cells[1]} | {ratio:.3f}{interval} "
        f"| {median(waits):.2f} s ({min(waits):.2f}-{max(waits):.2f}) |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
