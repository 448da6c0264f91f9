#!/usr/bin/env python3
"""What `trace = "block"` costs a run: the same workloads with and without the bpftrace
block-latency probes, in one experiment (the schedule interleaves them round by round), as
two-sided ratios traced / untraced with 95 % bootstrap intervals over the paired rounds.

    python3 bench/trace_overhead.py [--rounds 7] [--size 256M] [--scratch /var/tmp/layerbench-trace]

Needs root, bpftrace, BTF. Prints a Markdown table; exits 2 when the host cannot trace.
"""

import argparse
import math
import os
import shutil
import sys
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from run import ALPHA, ratio_interval, verdict  # noqa: E402

from layerbench.core.errors import UserError  # noqa: E402
from layerbench.core.runs import RunRecord  # noqa: E402
from layerbench.observe import tracing  # noqa: E402
from layerbench.session import Session  # noqa: E402

FIGURE = {"stream-write": "wall_s", "extract": "wall_s", "randread": "read_iops"}
WORKLOADS = {
    # name: workload table without the trace key
    "stream-write": 'kind = "stream-write"\nsize = "{size}"',
    "extract": 'kind = "extract"\narchive = "builtin:small-tree"',
    "randread": 'kind = "fio"\noptions = {{ rw = "randread", bs = "4k", size = "64M", iodepth = 16, '
    'ioengine = "libaio", direct = 1, runtime = 3, time_based = 1 }}',
}


def plan(rounds: int, size: str) -> str:
    lines = [f'name = "trace-overhead"\nreps = {rounds}\nwarmup = 1\n[stacks.disk]\nlayers = []']
    for name, body in WORKLOADS.items():
        text = body.format(size=size)
        lines.append(f"[workloads.{name}]\n{text}")
        lines.append(f'[workloads.{name}-traced]\n{text}\ntrace = "block"')
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--size", default="256M")
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp/layerbench-trace"))
    args = parser.parse_args()
    if reason := tracing.missing():
        print(f"trace_overhead: cannot trace here: {reason}")
        return 2
    try:
        # tracefs is mounted in the session's private namespace only; the results go to a
        # store that is removed with the session.
        with Session(args.scratch, "bench/trace_overhead.py") as session:
            data = session.run_plan(plan(args.rounds, args.size))
    except UserError as exc:  # not root, the scratch root in use, leftovers that stay
        print(f"trace_overhead: {exc}")
        return 2
    shutil.rmtree(args.scratch, ignore_errors=True)
    runs = [r for r in data.runs if r.measured]
    by: dict[str, dict[int, RunRecord]] = {}
    for run in runs:
        by.setdefault(run.workload, {})[run.rep] = run
    print("| workload: figure | untraced (median) | traced (median) | traced / untraced | goal | met |")
    print("|---|---|---|---|---|---|")
    for name in WORKLOADS:
        plain, traced = by.get(name, {}), by.get(f"{name}-traced", {})
        both = sorted(set(plain) & set(traced))
        figure = FIGURE[name]
        ours = [traced[r].required(figure) for r in both]
        base = [plain[r].required(figure) for r in both]
        if not both:
            print(f"| {name} | - | - | no paired rounds | | |")
            continue
        ratio, low, high, level = ratio_interval(ours, base, ALPHA)
        interval = f" [{low:.3f}-{high:.3f}, {level:.0%}]" if not math.isnan(low) else ""
        print(
            f"| {name}: {figure} | {median(base):.4g} | {median(ours):.4g} | {ratio:.3f}{interval} "
            f"| 1 ± 3% | {verdict(ratio, low, high)} |"
        )
    missing = {reason for r in runs if (reason := r.fact(tracing.TRACE_BLOCK_MISSING))}
    for reason in missing:
        print(f"\nnot traced: {reason}")
    print(f"\n{len(runs)} runs, {args.rounds} rounds, paired by round; on {os.uname().release}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
