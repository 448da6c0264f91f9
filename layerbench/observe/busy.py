"""Other processes' CPU over a window that opens as a command starts: `python3 -m layerbench`
and the `layerbench` script open it before the CLI's imports (most of a second), so a run's
busy-process check (selftest/doctor.py) finds the window already long enough and waits for
nothing. Light on purpose: it imports nothing of layerbench but procfs."""

import os
import time

from layerbench.linux import procfs

WINDOW_S = 0.5  # the least time the check looks at the other processes


def _process_cpu() -> dict[int, tuple[str, float]]:
    return {pid: (stat.comm, stat.cpu_s) for pid in procfs.pids() if (stat := procfs.pid_stat(pid))}


class BusyWindow:
    """Every process's CPU from when this is made to when busy() is asked."""

    def __init__(self) -> None:
        self.before = _process_cpu()
        self.opened = time.monotonic()

    def busy(self, share: float, window_s: float = WINDOW_S) -> list[tuple[float, int, str]]:
        """(share of a CPU, pid, name) of each other process that used at least `share` of a
        CPU over the window, busiest first; waits first for the rest of window_s."""
        if (rest := window_s - (time.monotonic() - self.opened)) > 0:
            time.sleep(rest)
        after = _process_cpu()
        seconds = time.monotonic() - self.opened
        mine = {os.getpid(), os.getppid()}
        found = sorted(
            (
                ((after[pid][1] - self.before[pid][1]) / seconds, pid, after[pid][0])
                for pid in after.keys() & self.before.keys()
                if pid not in mine and after[pid][0] == self.before[pid][0]  # not a reused pid
            ),
            reverse=True,
        )
        return [b for b in found if b[0] >= share]
