import json
import os
import shutil
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


# bpftrace under strace, which holds it for a second each time an epoll_wait returns: a
# SIGINT sent then arrives while bpftrace is between two waits, as one can on a busy CPU.
# The wrapper waits for strace to attach, then becomes bpftrace (same pid, comm "bpftrace"),
# so the SIGINT goes to bpftrace itself, not to strace.
HELD_BETWEEN_WAITS = """\
#!/bin/sh
strace -qq -o /dev/null -e trace=epoll_wait,epoll_pwait \
    -e inject=epoll_wait,epoll_pwait:delay_exit=1s -p $$ &
until grep -q '^TracerPid:[[:space:]]*[1-9]' /proc/$$/status; do sleep 0.01; done
exec bpftrace "$@"
"""

STOPPED_BETWEEN_WAITS = """
import json, sys, time
from pathlib import Path
from layerbench.linux import namespace
from layerbench.observe import tracing
from layerbench.scratch import Scratch

tracing._STOP_TIMEOUT_S = 15.0
assert namespace.enter_private_mount_namespace() is None
scratch = Scratch(Path(sys.argv[1]))
with scratch.directory("work", trial=False) as work:
    with tracing.block_trace(scratch, work) as trace:
        # bpftrace wrote its ready marker, waited 0.1 s, and is held for 1 s after that wait.
        time.sleep(0.5)
        stopping = time.monotonic()
    print(json.dumps([trace.missing, round(time.monotonic() - stopping, 2)]), flush=True)
"""


def test_a_stop_that_arrives_between_two_of_bpftraces_waits_still_stops_it(
    needs_root: None, scratch_root: Path, tmp_path: Path
) -> None:
    if reason := tracing.missing():
        pytest.skip(f"cannot trace here: {reason}")
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (apt install strace): it holds bpftrace between waits")
    wrapper = tmp_path / "bpftrace-held"
    wrapper.write_text(HELD_BETWEEN_WAITS)
    wrapper.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_BETWEEN_WAITS, str(scratch_root)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, tracing.PROGRAM_ENV: str(wrapper)},
    )
    assert done.returncode == 0, done.stderr
    missing, seconds = json.loads(done.stdout)
    # Before the stop was an event too, this SIGINT only set bpftrace's flag and the trace ran
    # on to the 15 s stop timeout. Held 1 s at each wait's end, a stop takes 7.5-8 s here.
    assert missing is None, done.stdout
    assert seconds < 12, done.stdout
    assert not leftovers(scratch_root)
