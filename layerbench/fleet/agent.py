"""A host's agent: one request of the head, in a child of the Ray worker, as root, in the
host's scratch root; the answer pickled on stdout.

It runs a trial exactly as `layerbench run` does here (its own mount namespace, the scratch
root's lock, recovery of what an earlier agent left, LocalExecutor), and tears everything
down when it is told to stop (SIGTERM, SIGINT, SIGHUP) or when its parent goes away: the
worker is killed when the head disappears or its node is taken down."""

import contextlib
import ctypes
import os
import pickle
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from layerbench import namespace
from layerbench.errors import UserError
from layerbench.executors.base import Setting
from layerbench.executors.local import LocalExecutor
from layerbench.experiment import make_workloads
from layerbench.fleet.requests import Answer, Request
from layerbench.scratch import Scratch


def _stop_on_signals(scratch: Scratch) -> None:
    count = 0

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal count
        count += 1
        if count == 1:
            raise KeyboardInterrupt
        scratch.hurry = True

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, handler)


def _watch_parent(parent: int) -> None:
    """PDEATHSIG follows the thread that forked us; this follows the process."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()


def serve(request: Request, scratch: Scratch) -> Any:
    executor = LocalExecutor(scratch)
    if request.operation == "describe":
        return executor.host()
    if request.operation == "sentinel":
        return executor.sentinel()
    assert request.plan is not None
    plan = request.plan.load()
    workloads = make_workloads(plan)
    executor.check(plan, workloads)  # also resolves the worlds and fetches what is missing
    if request.operation == "check":
        return None
    assert request.trial is not None
    started = time.time()
    result = executor.run(request.trial, Setting(plan, workloads, request.experiment_id))
    # When the host held the trial, by its own clock: its trials never overlap.
    result.facts.update(host_started=started, host_finished=time.time())
    return result


def answer(request: Request) -> Answer:
    if os.geteuid() != 0:
        return Answer(
            False, error="the host's agent runs as a user, not root: start `layerbench host join` as root"
        )
    # Before any thread starts: a mount namespace needs a single-threaded process.
    if reason := namespace.enter_private_mount_namespace():
        return Answer(False, error=f"no private mount namespace: {reason}")
    _watch_parent(int(os.environ.get("LAYERBENCH_AGENT_PARENT", os.getppid())))
    scratch = Scratch(Path(request.scratch))
    _stop_on_signals(scratch)
    try:
        scratch.lock(f"layerbench fleet host {request.host}")
        try:
            for problem in scratch.clean().problems:
                return Answer(False, error=f"cannot remove what an earlier run left: {problem}")
            return Answer(True, serve(request, scratch))
        finally:
            scratch.tidy()
            scratch.unlock()
    except UserError as exc:
        return Answer(False, error=str(exc))
    except KeyboardInterrupt:
        return Answer(False, error="stopped; everything built was torn down")


def _die_with_parent() -> None:
    """SIGTERM when the worker that started us exits (its thread, exactly; see _watch_parent)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def main() -> int:
    _die_with_parent()
    request: Request = pickle.load(sys.stdin.buffer)
    # The answer goes to the real stdout; anything else printed goes to stderr (the worker's log).
    answer_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    result = answer(request)
    with contextlib.suppress(BrokenPipeError):
        pickle.dump(result, answer_out)
        answer_out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
