"""The Ray task that carries a request to its host.

It holds the host's `lb-host:NAME` resource (one per host: never two trials on one host at
once) and is pinned to that host's node without fallback, and Ray never retries it: a trial
whose host died is never run on another (it would measure another machine)."""

import contextlib
import os
import pickle
import signal
import subprocess
import sys

import ray

from layerbench.fleet.requests import Answer, Request

RESOURCE_PREFIX = "lb-host:"


def _held_host() -> str:
    held = ray.get_runtime_context().get_assigned_resources()
    return ",".join(k.removeprefix(RESOURCE_PREFIX) for k in held if k.startswith(RESOURCE_PREFIX))


@ray.remote(max_retries=0)
def on_host(request: Request) -> Answer:
    ran_on = _held_host()
    if request.simulated:
        from layerbench.fleet import simulated

        answer = simulated.serve(request)
    else:
        answer = _through_agent(request)
    return Answer(answer.ok, answer.value, answer.error, ran_on)


@ray.remote(max_retries=0, num_cpus=0)
def describe_node(scratch: str) -> dict:
    """What a host is, asked of its node directly (a busy host answers too)."""
    import shutil
    from pathlib import Path

    from layerbench import host

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


def _through_agent(request: Request) -> Answer:
    """The request in a child process (agent.py) that dies with this worker: the worker
    is killed when the head goes away, and the agent then tears its trial down."""
    child = subprocess.Popen(
        [sys.executable, "-m", "layerbench.fleet.agent"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "LAYERBENCH_AGENT_PARENT": str(os.getpid())},
    )
    try:
        output, _ = child.communicate(pickle.dumps(request))
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGTERM)
        child.wait()
        raise
    if child.returncode != 0 or not output:
        return Answer(False, error=f"the host's agent exited with status {child.returncode}")
    return pickle.loads(output)
