"""Named points in a trial where a test can freeze the run and kill it exactly there.

With LAYERBENCH_STOP_AT=NAME in the environment, the process stops itself (SIGSTOP) the
first time it reaches NAME; the test then sends SIGKILL and checks the recovery. Without
the variable this costs one dictionary lookup."""

import os
import signal

_ENV = "LAYERBENCH_STOP_AT"
_reached: set[str] = set()

POINTS = ("helper-started", "stack-built", "run-started", "run-finished", "teardown")


def reached(name: str) -> None:
    if os.environ.get(_ENV) == name and name not in _reached:
        _reached.add(name)
        os.kill(os.getpid(), signal.SIGSTOP)
