"""A fleet host's agent and its guard, without Ray: the agent started as the host's actor
starts it (remote.HostAgent, in a process of its own standing in for the Ray worker), then
its guard or that "worker" killed, idle or mid-trial. The agent must go within seconds,
tear its trial down, release the scratch root and leave nothing.

Also what the fleet's e2e tests count as theirs: only the agents under their own root
(another run's agents may be running on this machine at the same time)."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import AGENT_MODULE, REPO, TEST_ROOT, fleet_agents, leftovers

from layerbench.scratch import Scratch

pytestmark = pytest.mark.e2e

pytest.importorskip("ray", reason="Ray is a dependency of layerbench (pyproject.toml)")

# The Ray worker as far as the agent can tell: SIGINT blocked (as a Ray worker has it), the
# actor's __init__ (the agent started from a thread that lives as long as it does), then,
# with "run", one request for a trial of PLAN asked from another thread (as an actor method
# would), then nothing.
WORKER = """
import signal, sys, threading, time
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
import layerbench.fleet.remote as remote
from layerbench.fleet.requests import PlanSource, Request
from layerbench.plan import parse_plan
from layerbench.plan.schedule import Trial

remote._held_host = lambda: "lifecycle"
scratch, mode, plan_text = sys.argv[1:4]
actor = remote.HostAgent.__ray_actor_class__("lifecycle", scratch)
print(actor.ready.ok, actor.child.pid, flush=True)
if mode == "run":
    source = PlanSource.of(parse_plan(plan_text, "lifecycle.toml"))
    assert actor.ask(Request("check", "lifecycle", scratch, plan=source)).ok
    trial = Trial(0, "dir", "wait", 0, False)
    request = Request("run", "lifecycle", scratch, plan=source, trial=trial, experiment_id=1)
    threading.Thread(target=actor.ask, args=(request,), daemon=True).start()
time.sleep(600)
"""
PLAN = """
name = "lifecycle"
baseline = "dir"
reps = 1
warmup = 0
sentinel = false

[stacks.dir]
layers = []

[workloads.wait]
kind = "command"
run = "sleep 57"
"""
# An agent idle or in its trial's teardown is gone well within this (measured: under 0.5 s).
GONE_S = 10.0


@pytest.fixture
def root(needs_root: None) -> Iterator[Path]:
    root = TEST_ROOT / "fleet-agent"
    subprocess.run(["rm", "-rf", str(root)], check=True)
    root.mkdir(parents=True)
    yield root
    subprocess.run(["rm", "-rf", str(root)], check=True)


def _start(root: Path, mode: str) -> tuple[subprocess.Popen[str], int, int]:
    """The stand-in worker, its agent's guard and the agent, once the agent is ready."""
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(root / "scratch"), mode, PLAN],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as Ray starts a worker
    )
    assert worker.stdout is not None
    ready, guard = worker.stdout.readline().split()
    assert ready == "True"
    (agent,) = [pid for pid in fleet_agents(root) if pid != int(guard)]
    assert _parent(agent) == int(guard)
    return worker, int(guard), agent


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _trial_started(agent: int) -> int:
    """The trial's timed command, once it runs (`sleep 57`, somewhere below the agent)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        below, found = list(_children(agent)), []
        while below:
            pid = below.pop()
            try:
                below += _children(pid)
                if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x0057\x00":
                    found.append(pid)
            except OSError:
                continue
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError("the trial never started")


def _gone(pids: list[int]) -> float:
    """Seconds until none of pids exists (zombies of ours reaped meanwhile); fails after GONE_S."""
    started = time.monotonic()
    while time.monotonic() - started < GONE_S:
        if not any(Path(f"/proc/{pid}").exists() and not _zombie(pid) for pid in pids):
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"still there after {GONE_S} s: {[p for p in pids if Path(f'/proc/{p}').exists()]}")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def _free(root: Path) -> None:
    """Nothing left, and the scratch root can be taken again (the agent released its lock)."""
    assert not leftovers(root)
    assert not fleet_agents(root)
    scratch = Scratch(root / "scratch")
    scratch.lock("the test")
    scratch.unlock()


def _stop(worker: subprocess.Popen[str]) -> None:
    if worker.poll() is None:
        worker.kill()
    worker.communicate(timeout=30)


@pytest.mark.parametrize("mode", ["idle", "run"])
def test_the_agent_goes_when_its_guard_is_killed(root: Path, mode: str) -> None:
    """Ray SIGKILLs a worker's children when the worker exits: that is the guard."""
    worker, guard, agent = _start(root, mode)
    try:
        timed = [_trial_started(agent)] if mode == "run" else []
        os.kill(guard, signal.SIGKILL)
        print(f"{mode}: the agent went {_gone([agent, *timed]):.2f} s after its guard was killed")
        _free(root)
    finally:
        _stop(worker)


@pytest.mark.parametrize("mode", ["idle", "run"])
def test_the_agent_goes_when_its_worker_is_killed(root: Path, mode: str) -> None:
    """The worker SIGKILLed (its node stopped): the guard dies with it, then the agent."""
    worker, guard, agent = _start(root, mode)
    try:
        timed = [_trial_started(agent)] if mode == "run" else []
        worker.kill()
        worker.wait()
        print(f"{mode}: the agent went {_gone([guard, agent, *timed]):.2f} s after its worker was killed")
        _free(root)
    finally:
        _stop(worker)


@pytest.mark.parametrize("mode", ["idle", "run"])
def test_the_agent_tears_down_when_its_workers_process_group_is_killed(root: Path, mode: str) -> None:
    """The raylet SIGKILLs a worker's whole process group when its node goes: the agent is
    in a group of its own, so it is told to stop (its guard gone) and tears its trial down
    (before, it was killed with the group: its trial's control group and directory stayed)."""
    worker, guard, agent = _start(root, mode)
    try:
        assert os.getpgid(agent) != os.getpgid(worker.pid) == os.getpgid(guard)
        timed = [_trial_started(agent)] if mode == "run" else []
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        print(f"{mode}: the agent went {_gone([guard, agent, *timed]):.2f} s after its group was killed")
        _free(root)
    finally:
        _stop(worker)


@pytest.mark.parametrize("mode", ["idle", "run"])
def test_the_agent_stops_on_sigint_though_its_worker_blocks_it(root: Path, mode: str) -> None:
    """SIGINT is one of the signals that stop an agent; a blocked mask is inherited."""
    worker, guard, agent = _start(root, mode)
    try:
        timed = [_trial_started(agent)] if mode == "run" else []
        os.kill(agent, signal.SIGINT)
        print(f"{mode}: the agent went {_gone([guard, agent, *timed]):.2f} s after SIGINT")
        _free(root)
    finally:
        _stop(worker)


def test_only_agents_under_the_tests_root_are_counted(tmp_path: Path) -> None:
    """Another run's agent on this machine is not this test's leftover (counting every
    `layerbench.fleet.agent` process made the netns test fail when the recovery stress
    harness's agent cases ran beside it)."""
    root = tmp_path / "fleet"

    def agent_like(*args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", AGENT_MODULE, *args])

    started = [
        ours := agent_like("--host", "a", "--scratch", str(root / "a")),
        agent_like("--host", "a", "--scratch", str(tmp_path / "fleet-other" / "a")),  # a sibling root
        agent_like(),  # the recovery stress harness's agent: its request on stdin
    ]
    try:
        deadline = time.monotonic() + 10
        while len(fleet_agents(tmp_path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)  # until each has exec'd
        assert fleet_agents(root) == [ours.pid]
        assert len(fleet_agents(tmp_path)) == 2
    finally:
        for child in started:
            child.kill()
            child.wait()
