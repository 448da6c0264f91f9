#!/usr/bin/env python3
"""How steady the host's CPUs are, and how much a probe of the CPU right before a run says of
the run: the noise no harness removes on a VM whose hypervisor slows its vCPUs.

    python3 bench/cpu_steadiness.py [--seconds 20] [--rounds 30] [--scratch /var/tmp/layerbench-cpu]

First, a fixed loop (1,000,000 additions of squares in Python) timed over and over on every
CPU at once, one process pinned to each, for --seconds: per CPU its median, range and CV,
the correlation of the CPUs' one-second means, and the steal time /proc/stat counted over it.
Then --rounds runs of a file workload (20,000 files of 4 KiB created, stat'ed and deleted on
a tmpfs, about 1 s), each pinned to CPU 0 and preceded by a 200,000-addition probe on that
CPU: the correlation of the probe's log time with the run's, and the spread of the run's log
time before and after a regression on the probe (the CUPED-style adjustment a pre-run
covariate would allow). Needs root (the tmpfs); removes its scratch directory at the end.
"""

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from layerbench.observe import cpu_speed  # noqa: E402

LOOP = 1_000_000
PROBE = 200_000

_PINNED_LOOP = """
import os, sys, time
from layerbench.observe.cpu_speed import fixed_loop
os.sched_setaffinity(0, {int(sys.argv[1])})
end = time.time() + float(sys.argv[2])
while time.time() < end:
    print(time.time(), fixed_loop(LOOP))
""".replace("LOOP", str(LOOP))

_FILES = """
import os, sys
top = sys.argv[1]
for i in range(20000):
    with open(f"{top}/f{i}", "wb") as f: f.write(b"x" * 4096)
for i in range(20000): os.stat(f"{top}/f{i}")
for i in range(20000): os.unlink(f"{top}/f{i}")
"""


def _steal_ticks() -> int:
    return int(Path("/proc/stat").read_text().split("\n", 1)[0].split()[8])


def cpus_side_by_side(seconds: float) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    steal = _steal_ticks()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _PINNED_LOOP, str(cpu), str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        for cpu in cpus
    ]
    outputs = [child.communicate()[0] for child in children]
    steal = _steal_ticks() - steal
    print(
        f"fixed loop on each of {len(cpus)} CPUs at once for {seconds:.0f} s; steal {steal} ticks over it\n"
    )
    print("| CPU | loops | median | range | CV |")
    print("|---|---|---|---|---|")
    means = []
    for cpu, output in zip(cpus, outputs, strict=True):
        pairs = [tuple(map(float, line.split())) for line in output.splitlines()]
        times = np.array([t for _, t in pairs])
        print(
            f"| {cpu} | {len(times)} | {1000 * np.median(times):.0f} ms | {1000 * times.min():.0f}-"
            f"{1000 * times.max():.0f} ms | {100 * times.std(ddof=1) / times.mean():.1f} % |"
        )
        seconds_of: dict[int, list[float]] = {}
        for stamp, took in pairs:
            seconds_of.setdefault(int(stamp), []).append(took)
        means.append({second: float(np.mean(v)) for second, v in seconds_of.items()})
    if len(means) > 1:
        common = sorted(set(means[0]) & set(means[1]))
        if len(common) > 2:
            r = np.corrcoef([means[0][s] for s in common], [means[1][s] for s in common])[0, 1]
            print(
                f"\none-second means of CPU {cpus[0]} and CPU {cpus[1]}: correlation {r:.2f}, {len(common)} s"
            )


def _probe() -> float:
    return cpu_speed.fixed_loop(PROBE)


def probe_before_runs(scratch: Path, rounds: int) -> None:
    scratch.mkdir(parents=True, exist_ok=False)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256M", "layerbench-cpu", str(scratch)], check=True)
    try:
        os.sched_setaffinity(0, {0})
        probes, runs = [], []
        for _ in range(rounds):
            probes.append(_probe())
            began = time.perf_counter()
            subprocess.run([sys.executable, "-c", _FILES, str(scratch)], check=True)
            runs.append(time.perf_counter() - began)
            time.sleep(0.5)
    finally:
        subprocess.run(["umount", str(scratch)], check=True)
        scratch.rmdir()
    log_probe, log_run = np.log(probes), np.log(runs)
    r = float(np.corrcoef(log_probe, log_run)[0, 1])
    slope = float(np.polyfit(log_probe, log_run, 1)[0])
    adjusted = log_run - slope * (log_probe - log_probe.mean())
    print(
        f"\n{rounds} runs on CPU 0 (tmpfs, 20,000 files), each after a probe of that CPU: runs "
        f"{min(runs):.2f}-{max(runs):.2f} s (CV {100 * np.std(runs, ddof=1) / np.mean(runs):.1f} %); "
        f"probe {1000 * min(probes):.0f}-{1000 * max(probes):.0f} ms; correlation of the logs {r:.2f}; "
        f"SD of the run's log {log_run.std(ddof=1):.3f}, {adjusted.std(ddof=1):.3f} adjusted for the probe "
        f"({100 * (1 - adjusted.std(ddof=1) / log_run.std(ddof=1)):.0f} % narrower; slope {slope:.2f})"
    )
    if math.isnan(r):
        print("(no spread to correlate)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp/layerbench-cpu"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (a tmpfs for the runs)", file=sys.stderr)
        return 2
    cpus_side_by_side(args.seconds)
    probe_before_runs(args.scratch, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
