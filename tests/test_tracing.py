import subprocess
import sys
from pathlib import Path

import pytest

from layerbench.observe import tracing
from tests.helpers import REPO, leftovers

# In a process of its own: the trace needs tracefs, which layerbench mounts only in a private
# mount namespace, and a process can enter one only while it has a single thread.
STOPPED_AT_ONCE = """
import sys, time
from pathlib import Path
from layerbench.linux import namespace
from layerbench.observe import tracing
from layerbench.scratch import Scratch

assert namespace.enter_private_mount_namespace() is None
scratch = Scratch(Path(sys.argv[1]))
with scratch.directory("work", trial=False) as work:
    for start in range(int(sys.argv[2])):
        began = time.monotonic()
        with tracing.block_trace(scratch, work) as trace:
            pass
        print(start, trace.missing, round(time.monotonic() - began, 2), flush=True)
"""


def test_a_trace_stopped_as_soon_as_it_started_stops_at_once_every_time(
    needs_root: None, scratch_root: Path
) -> None:
    if reason := tracing.missing():
        pytest.skip(f"cannot trace here: {reason}")
    starts = 20
    # A stop sent before bpftrace could take it was lost 4 times in 15 here, and the trace
    # then ran on until the 30 s stop timeout.
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_AT_ONCE, str(scratch_root), str(starts)],
        capture_output=True,
        text=True,
        timeout=starts * 10,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert len(lines) == starts, done.stdout
    for start, missing, seconds in lines:
        assert missing == "None", (start, missing, done.stdout)
        assert float(seconds) < 5, (start, seconds, done.stdout)
    assert not leftovers(scratch_root)
