#!/usr/bin/env python3
"""What ext4 without a journal costs a trial that creates files where the previous one
deleted them, and what placing each trial's directory in its own group (chattr +T on the
parent, as the scratch root does for its trials) takes off it.

    python3 bench/inode_reuse.py [--rounds 10] [--files 20000] [--scratch /var/tmp/layerbench-inodes]

Works in `--scratch`, on the file system that holds it (the effect needs ext4 without a
journal there: the bench says what it found). For each side (a parent with and without the
top-of-hierarchy flag) it runs the metadata workload's child (create, stat, delete, syncfs)
`--rounds` times, each in a fresh directory of that parent, caches dropped before each, back
to back within a side (in two blocks, ABBA). Prints a Markdown table: each side's median and
range of elapsed time, and the ratio +T / plain with its 95 % bootstrap interval. Needs root.
"""

import argparse
import os
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

from layerbench.linux import mounts, system  # noqa: E402
from layerbench.observe import measure  # noqa: E402

CHILD = REPO / "layerbench" / "workloads" / "_metadata_child.py"


def one(parent: Path, index: int, files: int) -> float:
    top = parent / f"t{index}"
    top.mkdir()
    work = top / "metadata"
    measure.drop_caches()
    began = time.monotonic()
    argv = [sys.executable, "-S", str(CHILD), str(work), str(files), "4096", "1000", "create,stat,delete"]
    subprocess.run(argv, check=True)
    elapsed = time.monotonic() - began
    shutil.rmtree(top)
    os.sync()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp/layerbench-inodes"))
    args = parser.parse_args()
    args.scratch.mkdir(parents=True, exist_ok=True)
    fstype, source, _ = mounts.filesystem_of(args.scratch)
    journal = mounts.has_journal(source) if fstype == "ext4" else None
    times: dict[str, list[float]] = {"spread": [], "plain": []}
    try:
        for side in times:
            (args.scratch / side).mkdir()
            if side == "spread" and not system.spread_subdirectories(args.scratch / side):
                print(f"{fstype} takes no top-of-hierarchy flag: nothing to compare", file=sys.stderr)
                return 2
        # Back to back within a side, as trials follow each other: the effect lives in the
        # seconds between one run's deletions and the next run's creations. Two blocks per
        # side, in ABBA order, so that drift hits both alike.
        block = max(1, args.rounds // 2)
        for index, side in enumerate(("plain", "spread", "spread", "plain")):
            for repetition in range(block):
                times[side].append(one(args.scratch / side, index * block + repetition, args.files))
    finally:
        shutil.rmtree(args.scratch, ignore_errors=True)
    spread, plain = times["spread"], times["plain"]
    ratio, low, high, level = ratio_interval(spread, plain, ALPHA)  # pairs: the i-th run of each side
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    kind = {True: "with a journal", False: "without a journal", None: ""}[journal]
    print(f"inode reuse, {fstype} {kind} ({source}), {args.files} files, {args.rounds} rounds, {stamp}")
    print()
    print("| metadata (create, stat, delete) | each in its own group (+T) | beside the last one | ratio |")
    print("|---|---|---|---|")
    print(
        f"| elapsed | {median(spread):.3f} s ({min(spread):.3f}-{max(spread):.3f}) "
        f"| {median(plain):.3f} s ({min(plain):.3f}-{max(plain):.3f}) "
        f"| {ratio:.3f} [{low:.3f}-{high:.3f}, {level:.0%}] |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
