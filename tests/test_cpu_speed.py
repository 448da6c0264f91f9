"""observe/cpu_speed.py: the fixed loop on the run's CPUs, right before the run."""

import os
import signal
import statistics
import time

from layerbench.observe import cpu_speed


def test_the_probe_times_the_loop_on_each_allowed_cpu_and_restores_the_threads_cpus() -> None:
    allowed = os.sched_getaffinity(0)
    seconds = cpu_speed.probe()
    assert 0 < seconds < 1
    assert os.sched_getaffinity(0) == allowed
    one = min(allowed)
    assert 0 < cpu_speed.probe([one]) < 1
    assert os.sched_getaffinity(0) == allowed


def test_cpus_the_process_may_not_use_are_left_out() -> None:
    allowed = os.sched_getaffinity(0)
    absent = max(allowed) + 1000
    assert 0 < cpu_speed.probe([absent]) < 1  # none of them usable: every allowed CPU instead
    assert os.sched_getaffinity(0) == allowed


def test_a_busy_cpu_reads_slower_than_an_idle_one() -> None:
    """The probe measures what the run would meet: with a spinning process of higher priority
    (nice -10, ten times the weight) held to the same CPU, the loop gets a tenth of it, whatever
    else runs beside the test. Quiet and busy alternate (the competitor stopped and continued),
    so that a host slowing the vCPU for seconds slows both sides alike."""
    cpu = min(os.sched_getaffinity(0))
    pid = os.fork()
    if pid == 0:  # a process, not a thread: it contends for the CPU, not for the GIL
        os.sched_setaffinity(0, {cpu})
        os.setpriority(os.PRIO_PROCESS, 0, -10)
        while True:
            pass
    quiet, busy = [], []
    try:
        for _ in range(9):
            os.kill(pid, signal.SIGSTOP)
            quiet.append(cpu_speed.probe([cpu]))
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.01)  # the competitor is running again
            busy.append(cpu_speed.probe([cpu]))
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert statistics.median(busy) > 2 * statistics.median(quiet)
    assert cpu_speed.facts([cpu])["cpu_probe_s"] > 0
