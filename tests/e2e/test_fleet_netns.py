"""A fleet of real hosts on this machine: a head and three bench hosts, each in a network
namespace of its own on the test network 10.213.0.0/24 (tests/netns.py), started by the real
`host head` and `host join` commands there, each host with its own scratch root; every run
in a PostgreSQL cluster the test creates (reached through its Unix socket).

Each namespace's Ray listens on that host's address only; a plan runs on the three hosts;
a host whose link goes down is `interrupted (host lost)` within 30 s while the others
finish; with its link back, joined again, `run --resume` runs only what it was missing.
The namespaces, their links, every process started in them, the fleet's cgroups and Ray's
files are removed afterwards, whatever the outcome."""

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, TEST_ROOT, cli, fleet_agents, leftovers
from netns import Host, listening, network

pytestmark = pytest.mark.e2e

pytest.importorskip("ray", reason="Ray is a dependency of layerbench (pyproject.toml)")

from layerbench.fleet import confine  # noqa: E402
from layerbench.store import Store  # noqa: E402

PLAN = """
name = "fleet-netns"
baseline = "dir"
reps = 6
warmup = 0
order = "interleaved"
sentinel = false
rerun_disturbed = 0  # four Ray nodes on two cores disturb each other; each trial runs once

[stacks.dir]
layers = []

[stacks.tmpfs]
layers = [{ kind = "tmpfs", size = "64M" }]

[workloads.write]
kind = "command"
run = "sh -c 'dd if=/dev/zero of=out bs=1M count=4 conv=fsync status=none && sleep 1'"
"""
TRIALS = 12


def _missing_tools() -> str | None:
    for tool in ("ip", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (iproute2, util-linux)"
    return None


class NamespaceFleet:
    """The head (in the first namespace) and the hosts by name, with what their commands need."""

    def __init__(self, root: Path, namespaces: list[Host], port: int, tag: str) -> None:
        self.root = root
        self.head = namespaces[0]
        self.port = port
        self.address = f"{self.head.address}:{port}"
        self.hosts = {
            f"n{tag}{letter}": namespace for letter, namespace in zip("abc", namespaces[1:], strict=True)
        }
        self.credentials = ("--credentials", str(root / "credentials"))

    def env(self, namespace: Host) -> dict[str, str]:
        # Ray's files per namespace (a session each), under the test's root; short paths:
        # Ray's Unix sockets live there.
        return {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "RAY_TMPDIR": str(self.root / namespace.namespace[-2:]),
        }

    def layerbench(
        self, namespace: Host, *args: str, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return namespace.run(
            sys.executable, "-m", "layerbench", *args, env=self.env(namespace), timeout=timeout
        )

    def join(self, name: str) -> subprocess.CompletedProcess[str]:
        host = self.hosts[name]
        return self.layerbench(
            host, "host", "join", self.address, "--name", name, "--scratch", str(self.root / name),
            "--bind", host.address, *self.credentials,
        )  # fmt: skip


@pytest.fixture
def netns_fleet(needs_root: None, postgres_cluster: Any) -> Iterator[tuple[NamespaceFleet, str]]:
    if reason := _missing_tools():
        pytest.skip(reason)
    tag = str(os.getpid() % 10000)  # names another run's namespaces and cgroups do not have
    root = TEST_ROOT / "n"  # short: Ray's sockets lie below it (RAY_TMPDIR below), at most 107 bytes
    port = 20000 + os.getpid() % 20000  # the head's cgroup is named after it: unique here
    with contextlib.ExitStack() as cleanup:
        with contextlib.suppress(FileNotFoundError):
            subprocess.run(["rm", "-rf", str(root)], check=True)
        root.mkdir(parents=True)
        cleanup.callback(subprocess.run, ["rm", "-rf", str(root)], check=False)
        names = [f"n{tag}{letter}" for letter in "abc"]
        for name in names:  # callbacks run last first: after the namespaces' processes are gone
            cleanup.callback(cli, "clean", "--scratch", str(root / name), "--db", str(root / "none.db"))
        namespaces = cleanup.enter_context(network(4, tag))
        fleet = NamespaceFleet(root, namespaces, port, tag)
        assert list(fleet.hosts) == names
        head = fleet.layerbench(
            fleet.head, "host", "head", "--bind", fleet.head.address, "--port", str(port), *fleet.credentials
        )
        assert head.returncode == 0, head.stderr
        for name in fleet.hosts:
            joined = fleet.join(name)
            assert joined.returncode == 0, joined.stderr
        yield fleet, postgres_cluster.create_database(f"netns{time.monotonic_ns()}")
    assert not root.exists()
    left = [p for p in Path("/run/netns").iterdir() if p.name.startswith(f"lb{tag}")]
    assert not left, f"namespaces left: {left}"
    groups = Path(confine._unified_mount()) / confine.PARENT
    assert not [
        g for g in (groups.iterdir() if groups.exists() else []) if tag in g.name or str(port) in g.name
    ]


def _nothing_left(root: Path) -> None:
    """No agent of this fleet (its scratch roots are under root: another run's agents on
    this machine are not ours to wait for) and nothing it made is left."""
    deadline = time.monotonic() + 30
    while (fleet_agents(root) or leftovers(root)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not fleet_agents(root) and not leftovers(root), [_described(pid) for pid in fleet_agents(root)]


def _described(pid: int) -> str:
    """An agent still there: its state, parent, cgroup and what it waits in."""
    with contextlib.suppress(OSError):
        status = dict(
            line.split(":\t", 1)
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if ":\t" in line
        )
        group = Path(f"/proc/{pid}/cgroup").read_text().strip()
        waits = Path(f"/proc/{pid}/wchan").read_text()
        return f"{pid}: {status['State']}, parent {status['PPid']}, {group}, in {waits}"
    return f"{pid}: gone"


def _raylets(namespace: Host) -> list[int]:
    found = []
    for pid in namespace.pids():
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == "raylet":
                found.append(pid)
    return found


def _by_host(store: Store) -> dict[str, dict[str, Any]]:
    return {e.host: e for e in store.history()}


def test_three_hosts_in_namespaces_listen_on_their_own_address_run_lose_one_and_resume(
    netns_fleet: tuple[NamespaceFleet, str], tmp_path: Path
) -> None:
    fleet, database = netns_fleet
    # Every Ray process of each namespace listens on that namespace's address, nowhere else.
    for namespace in (fleet.head, *fleet.hosts.values()):
        found = listening(namespace, namespace.pids())
        print(namespace.namespace, *(str(listener) for listener in found), sep="\n  ")
        assert any(listener.command == "raylet" for listener in found), found
        assert {listener.address for listener in found} == {namespace.address}, found
    listed = fleet.layerbench(fleet.head, "host", "list", fleet.address, *fleet.credentials)
    assert listed.returncode == 0 and listed.stdout.count("idle") == 3, listed.stdout + listed.stderr

    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    running = fleet.head.start(
        sys.executable, "-m", "layerbench", "run", str(plan), "--fleet", fleet.address, "--db", database,
        "--quiet", *fleet.credentials, env=fleet.env(fleet.head),
    )  # fmt: skip
    store = Store(database)
    lost_name = list(fleet.hosts)[1]
    deadline = time.monotonic() + 300
    while (lost := _by_host(store).get(lost_name)) is None or lost.runs < 2:
        if time.monotonic() > deadline or running.poll() is not None:
            running.kill()
            pytest.fail(f"host {lost_name} stored no runs: {running.communicate()}")
        time.sleep(0.2)
    # Mid-run too, with the driver on the head and each host's actor and agent started.
    for namespace in (fleet.head, *fleet.hosts.values()):
        found = listening(namespace, namespace.pids())
        assert {listener.address for listener in found} == {namespace.address}, found
    fleet.hosts[lost_name].cut_off()
    cut = time.monotonic()
    while _by_host(store)[lost_name].status == "running" and time.monotonic() - cut < 60:
        time.sleep(0.2)
    noticed = time.monotonic() - cut
    print(f"host {lost_name}: interrupted {noticed:.1f} s after its link went down")
    record = store.experiment(_by_host(store)[lost_name].id)
    assert (record.status, record.status_reason) == ("interrupted", "host lost")
    assert noticed <= 30, noticed
    _, errors = running.communicate(timeout=600)
    assert running.returncode == 1, errors  # one host did not finish
    experiments = _by_host(store)
    for name in fleet.hosts:
        runs = store.runs(experiments[name].id)
        assert {r.facts["fleet_host"] for r in runs} == {name}  # nothing ran anywhere else
        if name != lost_name:
            assert experiments[name].status == "done" and len(runs) == TRIALS
    kept = len(store.runs(experiments[lost_name].id))
    assert 2 <= kept < TRIALS

    # The link is back: the host's Ray learns it was declared dead and stops (its agent tears
    # down); joined again, its experiment resumes there with only what it was missing.
    lost_host = fleet.hosts[lost_name]
    lost_host.reconnect()
    deadline = time.monotonic() + 90
    while _raylets(lost_host) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _raylets(lost_host), "the cut-off host's raylet did not stop once its link was back"
    stale = Path(confine._unified_mount()) / confine.PARENT / f"host-{lost_name}"
    confine.Confinement(
        stale, lost_host.address
    ).stop()  # what of its old Ray still runs (an operator's `kill`)
    _nothing_left(fleet.root)
    joined = fleet.join(lost_name)
    assert joined.returncode == 0, joined.stderr
    resumed = fleet.layerbench(
        fleet.head, "run", "--resume", str(experiments[lost_name].id), "--fleet", fleet.address,
        "--db", database, "--quiet", *fleet.credentials, timeout=600,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    runs = store.runs(experiments[lost_name].id)
    assert sorted(r.trial for r in runs) == list(range(TRIALS))
    assert store.experiment(experiments[lost_name].id).status == "done"
    _nothing_left(fleet.root)
