"""Reading processes from /proc."""

import subprocess
import time

from layerbench.linux import procfs


def test_descendants_are_found_below_a_process_grandchildren_included() -> None:
    parent = subprocess.Popen(["sh", "-c", "sh -c 'sleep 30' & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(found := procfs.descendants(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        names = [stat.comm for pid in found if (stat := procfs.pid_stat(pid))]
        assert names == ["sh", "sleep"], names  # parents first
        assert procfs.descendants(found[-1]) == []
    finally:
        for pid in procfs.descendants(parent.pid)[::-1]:
            subprocess.run(["kill", str(pid)], check=False)
        parent.kill()
        parent.wait()
