"""A host's agent: the requests of one experiment on this host, one at a time, in a child of
the host's Ray actor (remote.HostAgent), as root, in the host's scratch root.

    python -m layerbench.fleet.agent --host NAME --scratch DIR

It is started once per experiment and host (a Python start-up, the imports, the namespace,
the lock and the recovery cost about a second: paid once, not per trial). It first enters
its own mount namespace, takes the scratch root's lock (held until it exits) and recovers
whatever an earlier agent left, then says whether it is ready; then it answers each request
read from stdin (pickled), on its stdout, until stdin closes. A trial runs exactly as
`layerbench run` runs it here (LocalExecutor). Everything is torn down when it is told to
stop (SIGTERM, SIGINT, SIGHUP) or when its parent goes away: the actor is killed when the
head disappears or its node is taken down."""

import argparse
import contextlib
import ctypes
import os
import pickle
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

from layerbench.core.errors import UserError
from layerbench.executors.base import Setting
from layerbench.executors.local import LocalExecutor
from layerbench.experiment import make_workloads
from layerbench.fleet.requests import HOST_FINISHED, HOST_STARTED, Answer, PlanSource, Request
from layerbench.plan import Plan
from layerbench.session import MountNamespace, Session
from layerbench.workloads.base import Workload

# An agent whose experiment just ended may still be tearing its last trial down (the head
# died, and a new one resumes at once): the next one waits this long for the lock.
LOCK_WAIT_S = 60.0


def _watch_parent(parent: int) -> None:
    """PDEATHSIG follows the thread that forked us; this follows the process."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()


class Agent:
    """What stays from one request to the next: the executor, and each plan once checked."""

    def __init__(self, executor: LocalExecutor) -> None:
        self.executor = executor
        self.checked: dict[PlanSource, tuple[Plan, dict[str, Workload]]] = {}

    def _checked(self, source: PlanSource) -> tuple[Plan, dict[str, Workload]]:
        """The plan and its workloads, checked (and what they need fetched) on its first request."""
        if source not in self.checked:
            plan = source.load()
            workloads = make_workloads(plan)
            self.executor.check(plan, workloads)  # also resolves the worlds and fetches what is missing
            self.checked[source] = (plan, workloads)
        return self.checked[source]

    def serve(self, request: Request) -> Any:
        if request.operation == "describe":
            return self.executor.host()
        if request.operation == "sentinel":
            return self.executor.sentinel()
        assert request.plan is not None
        plan, workloads = self._checked(request.plan)
        if request.operation == "check":
            return None
        assert request.trial is not None
        started = time.time()
        result = self.executor.run(request.trial, Setting(plan, workloads, request.experiment_id))
        # When the host held the trial, by its own clock: its trials never overlap.
        result.facts.update({HOST_STARTED.key: started, HOST_FINISHED.key: time.time()})
        return result


def _send(answers: BinaryIO, answer: Answer) -> None:
    with contextlib.suppress(BrokenPipeError):
        pickle.dump(answer, answers)
        answers.flush()


def serve_requests(session: Session, requests: BinaryIO, answers: BinaryIO) -> None:
    """Ready, then one answer per request until stdin closes or a signal stops it."""
    agent = Agent(session.executor)
    _send(answers, Answer(True))
    try:
        while True:
            try:
                request: Request = pickle.load(requests)
            except EOFError:  # the experiment is over on this host
                return
            try:
                answer = Answer(True, agent.serve(request))
            except UserError as exc:
                answer = Answer(False, error=str(exc))
            _send(answers, answer)
    except KeyboardInterrupt:
        _send(answers, Answer(False, error="stopped; everything built was torn down"))


def _die_with_parent(signum: int) -> None:
    """signum when the thread that forked us exits (see also _watch_parent)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signum)  # PR_SET_PDEATHSIG


def _behind_a_guard() -> int:
    """Fork: the process the actor started becomes a guard that only waits; the agent goes
    on in the child, in a process group of its own, and the guard's pid is returned there.
    Ray SIGKILLs a worker's children (and its process group) when the worker exits (its
    owner, the head's driver, gone, or its node), which would leave a trial standing: it
    kills the guard instead, and the agent is then sent SIGTERM (PR_SET_PDEATHSIG) and
    tears down. The guard dies with the actor's thread that started it, or on SIGTERM."""
    _die_with_parent(signal.SIGKILL)  # remote.HostAgent keeps that thread as long as we run
    guard = os.getpid()
    agent = os.fork()
    if agent == 0:
        # Out of the worker's process group: Ray's raylet SIGKILLs a worker's whole group when
        # the worker goes (its node taken down), which would kill the agent mid-trial with no
        # teardown (its trial's control group and directory left for the next agent to recover).
        os.setpgid(0, 0)
        _die_with_parent(signal.SIGTERM)
        if os.getppid() != guard:  # the guard went before the line above: nothing is built yet
            os._exit(1)
        return guard
    for descriptor in (0, 1):  # the actor sees the agent's end of the pipes, not ours
        os.close(descriptor)
    _, status = os.waitpid(agent, 0)
    os._exit(os.waitstatus_to_exitcode(status) % 256)


def main() -> int:
    guard = _behind_a_guard()
    parser = argparse.ArgumentParser(prog="python -m layerbench.fleet.agent")
    parser.add_argument("--host", required=True)
    parser.add_argument("--scratch", type=Path, required=True)
    args = parser.parse_args()
    # The answers go to the real stdout; anything else printed goes to stderr (the actor's log).
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    session = Session(
        args.scratch,
        f"layerbench fleet host {args.host}",
        with_store=False,
        mounts=MountNamespace.PRIVATE,
        lock_wait_s=LOCK_WAIT_S,
        root_hint="start `layerbench host join` as root",
    )
    try:
        # The session enters the mount namespace, which needs a single-threaded process:
        # the watching thread starts once inside.
        with session:
            _watch_parent(guard)
            serve_requests(session, sys.stdin.buffer, answers)
    except UserError as exc:  # not root, no namespace, the lock held, leftovers that stay
        _send(answers, Answer(False, error=str(exc)))
    except KeyboardInterrupt:  # a signal before the loop: nothing was built yet
        pass
    with contextlib.suppress(BrokenPipeError):
        answers.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
