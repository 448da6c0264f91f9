"""The host's CPU speed right before a timed run: a fixed loop timed on each CPU the run may
use, outside the timed region (a pre-run covariate, analysis/covariates.py).

On a VM the hypervisor can slow a vCPU without descheduling it (no steal time shows): measured
on this project's VM with nothing else running, the same loop took 105-254 ms (CV 22-30 %) in
phases of several seconds, the two vCPUs largely apart. A run that spends its time on the CPU
slows with it; a probe taken just before says part of that (30 one-second file runs pinned to
the probed vCPU: correlation 0.52-0.61 with a 20-ms probe; bench/cpu_steadiness.py)."""

import os
import time

from layerbench.core.facts import Fact, declare

CPU_PROBE_S = Fact(
    "cpu_probe_s",
    "before",
    "seconds a fixed loop took right before the run, the mean over the CPUs the run may use "
    "(the host's CPU speed then; longer is slower)",
    float,
)
declare(CPU_PROBE_S)

# About 8 ms a CPU on this project's VM at its usual speed: short beside a trial's untimed
# second or more, long beside the timer's resolution.
_ITERATIONS = 100_000


def fixed_loop(iterations: int = _ITERATIONS) -> float:
    """Seconds a loop of `iterations` additions of squares takes here: CPU and nothing else
    (the drift sentinel's CPU part is the same loop, longer)."""
    began = time.perf_counter()
    total = 0
    for i in range(iterations):
        total += i * i
    return time.perf_counter() - began


def probe(cpus: list[int] | None = None) -> float:
    """The loop's mean seconds over `cpus` (default: every CPU this process may run on), each
    timed with the calling thread held to that CPU; the thread's CPUs are restored after."""
    allowed = os.sched_getaffinity(0)
    chosen = [cpu for cpu in (cpus or sorted(allowed)) if cpu in allowed] or sorted(allowed)
    took = []
    try:
        for cpu in chosen:
            os.sched_setaffinity(0, {cpu})
            took.append(fixed_loop())
    finally:
        os.sched_setaffinity(0, allowed)
    return sum(took) / len(took)


def facts(cpus: list[int] | None = None) -> dict[str, float]:
    return {CPU_PROBE_S.key: round(probe(cpus), 6)}
