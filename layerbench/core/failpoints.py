"""Named points in a trial where a test can freeze the run and kill it exactly there.

With LAYERBENCH_STOP_AT=NAME in the environment, the process stops itself (SIGSTOP) the
first time it reaches NAME; the test then sends SIGKILL and checks the recovery. Without
the variable this costs one dictionary lookup. LAYERBENCH_RAISE_AT=NAME raises an
unexpected exception there instead (a stand-in for a bug, to test how one is reported).
LAYERBENCH_TEST_SYNC_TOP_ONLY=1 makes a workload's final sync reach only the stack's top,
not the file systems under it: the bug the durability check exists to catch."""

import os
import signal

_ENV = "LAYERBENCH_STOP_AT"
_RAISE_ENV = "LAYERBENCH_RAISE_AT"
_reached: set[str] = set()

POINTS = ("helper-started", "stack-built", "run-started", "run-finished", "teardown", "churn-mounted")


def sync_top_only() -> bool:
    """Test-only: leave out the sync of the file systems below the top (see durability)."""
    return os.environ.get("LAYERBENCH_TEST_SYNC_TOP_ONLY") == "1"


def reached(name: str) -> None:
    if os.environ.get(_ENV) == name and name not in _reached:
        _reached.add(name)
        os.kill(os.getpid(), signal.SIGSTOP)
    if os.environ.get(_RAISE_ENV) == name:
        raise RuntimeError(f"{_RAISE_ENV}={name}: an unexpected error injected at {name}")
