"""What carries the head's requests to a host, and nowhere else.

A real host's requests go to its HostAgent: a Ray actor started once per experiment on that
host, holding the host's `lb-host:NAME` resource for as long as it lives (one per host:
never two experiments, never two trials on one host at once), pinned to the host's node
without fallback, never restarted and never retried: a host that died is never replaced by
another (it would measure another machine). The actor keeps one agent process (agent.py) and
hands it one request at a time over a pipe. A simulated host's request is one Ray task
(on_host), answered in the worker."""

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import threading
from pathlib import Path

import ray

from layerbench.fleet.requests import Answer, Request

RESOURCE_PREFIX = "lb-host:"
# How long a closing agent may take to tear down and release the scratch root.
CLOSE_WAIT_S = 120.0


def _held_host() -> str:
    held = ray.get_runtime_context().get_assigned_resources()
    return ",".join(k.removeprefix(RESOURCE_PREFIX) for k in held if k.startswith(RESOURCE_PREFIX))


def _agent_environment() -> dict[str, str]:
    """The agent imports the layerbench this actor runs (Ray gives a worker its driver's
    import path, not its children)."""
    import layerbench

    package_parent = str(Path(layerbench.__file__).resolve().parent.parent)
    search = [package_parent, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(search)}


@ray.remote(max_restarts=0, max_task_retries=0)
class HostAgent:
    """The host's agent for one experiment: started with the actor, then asked one request
    at a time (the actor runs one method call at a time)."""

    def __init__(self, host: str, scratch: str) -> None:
        self.ran_on = _held_host()
        started = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None
        # The agent dies with the thread that forked it (PR_SET_PDEATHSIG): a thread that
        # lives exactly as long as the agent, so the agent outlives no actor and no actor
        # method's thread ends it early.
        threading.Thread(target=self._keep, args=(host, scratch, started), daemon=True).start()
        started.wait()
        assert self.child is not None and self.child.stdout is not None
        self.ready: Answer = self._read()

    def _keep(self, host: str, scratch: str, started: threading.Event) -> None:
        try:
            self.child = subprocess.Popen(
                [sys.executable, "-m", "layerbench.fleet.agent", "--host", host, "--scratch", scratch],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=_agent_environment(),
            )
        finally:
            started.set()
        self.child.wait()

    def _read(self) -> Answer:
        assert self.child is not None and self.child.stdout is not None
        try:
            answer: Answer = pickle.load(self.child.stdout)
        except (EOFError, pickle.UnpicklingError):
            return Answer(False, error=f"the host's agent exited with status {self.child.wait()}")
        return Answer(answer.ok, answer.value, answer.error, self.ran_on)

    def ask(self, request: Request) -> Answer:
        if not self.ready.ok:
            return self.ready
        assert self.child is not None and self.child.stdin is not None
        try:
            pickle.dump(request, self.child.stdin)
            self.child.stdin.flush()
        except BrokenPipeError:
            return Answer(
                False, error=f"the host's agent exited with status {self.child.wait()}", ran_on=self.ran_on
            )
        return self._read()

    def close(self) -> int | None:
        """The agent's stdin closed: it tears down what is left, releases the scratch root and
        exits; stopped with SIGTERM if it takes too long. Its exit status."""
        assert self.child is not None
        with contextlib.suppress(BrokenPipeError):
            if self.child.stdin is not None:
                self.child.stdin.close()
        try:
            return self.child.wait(timeout=CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self.child.send_signal(signal.SIGTERM)
            return self.child.wait()


@ray.remote(max_retries=0)
def on_host(request: Request) -> Answer:
    """A simulated host's request (simulated.py), in whichever worker holds its resource."""
    from layerbench.fleet import simulated

    answer = simulated.serve(request)
    return Answer(answer.ok, answer.value, answer.error, _held_host())


@ray.remote(max_retries=0, num_cpus=0)
def describe_node(scratch: str) -> dict:
    """What a host is, asked of its node directly (a busy host answers too)."""
    import shutil
    from pathlib import Path

    from layerbench.observe import host

    place = Path(scratch)
    while not place.exists():
        place = place.parent
    facts = host.describe(place)
    disk = (facts["disks"] or [{}])[0]
    return {
        "cpus": facts["cpus"],
        "cpu": facts["cpu_model"],
        "kernel": facts["kernel"],
        "disk": f"{disk.get('name', '?')} ({disk.get('model', 'unknown')})",
        "scratch_free_bytes": shutil.disk_usage(place).free,
    }
