"""The hosts of a fleet: a Ray cluster whose bench nodes each carry one `lb-host:NAME`
resource, with the host's scratch root recorded in the cluster's key-value store.

`layerbench host head` starts the head (dashboard off, health checks tuned so that a lost
host is noticed in seconds); `layerbench host join HEAD` makes this machine a host;
`layerbench host list` shows them. Every Ray process of the fleet listens on its --bind
address only (confine.py) and takes requests carrying the fleet's token only
(credentials.py); each command verifies the first and refuses to go on otherwise."""

import atexit
import contextlib
import json
import logging
import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import AuthenticationError

from layerbench.core.errors import UserError
from layerbench.fleet import confine
from layerbench.fleet.credentials import Credentials
from layerbench.fleet.remote import RESOURCE_PREFIX

NAMESPACE = "layerbench"
# A node that misses its health checks for about 5 s is dead; its trial then fails within
# seconds (the issue asks for 30 s at most), never waits for it, never moves elsewhere.
HEALTH_CHECKS = {
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 5,
}
_NAME_CHARACTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


@dataclass(frozen=True)
class Host:
    name: str
    node_id: str
    scratch: str
    simulated: bool = False
    address: str = ""

    @property
    def resource(self) -> str:
        return RESOURCE_PREFIX + self.name


# `ray start`, except that a loopback address stays loopback: Ray swaps 127.0.0.1 for this
# machine's reachable address so that other machines can reach the node, but a fleet bound
# to loopback is one nothing else may reach, by choice.
_RAY_START = """
import sys
import ray._private.services
ray._private.services.resolve_ip_for_localhost = lambda host: host
from ray.scripts.scripts import cli
cli(["start", *sys.argv[1:]])
"""
# How long the processes `ray start` leaves behind may still be opening sockets (its agents
# start after it returns), and how long their listening sockets must stay as they are.
_SETTLE_S = 15.0
_STEADY_S = 1.5


@contextlib.contextmanager
def _loopback_kept() -> Iterator[None]:
    """ray.init connects to a loopback head as given (see _RAY_START)."""
    import ray._private.services as services

    original = services.resolve_ip_for_localhost
    services.resolve_ip_for_localhost = lambda host: host
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = original


def _reachable(address: str) -> None:
    if not address or address == "auto" or ":" not in address:
        raise UserError(
            f"fleet head {address!r}: give the head explicitly, as HOST:PORT (e.g. 10.0.0.1:6379)"
        )
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5):
            pass
    except (OSError, ValueError) as exc:
        raise UserError(f"fleet head {address}: unreachable ({exc})") from None


def _own_group() -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return confine._unified_mount() / line[3:].lstrip("/")
    raise UserError("the fleet needs a cgroup v2 tree (this process is in none)")


def _confine_driver(address: str) -> None:
    """A driver listens too (its core worker's gRPC server, on every interface): it is kept
    to this machine's address towards the head, as the nodes are to theirs, in a cgroup of
    its own that it leaves and removes at exit (one a killed driver left is removed by the
    next)."""
    if os.geteuid() != 0:
        raise UserError(f"fleet head {address}: a client of the fleet runs as root (its bind filter)")
    parent = confine._unified_mount() / confine.PARENT
    home = _own_group()
    if home.parent == parent:  # confined already (a test's fleet, or an earlier connect)
        return
    for stale in parent.glob("driver-*") if parent.exists() else []:
        if not Path(f"/proc/{stale.name.removeprefix('driver-')}").exists():
            with contextlib.suppress(OSError):
                stale.rmdir()
    confinement = confine.Confinement.create(f"driver-{os.getpid()}", _address_towards(address))
    confinement.enter()

    def leave() -> None:
        with contextlib.suppress(OSError):
            (home / "cgroup.procs").write_text(str(os.getpid()))
            confinement.group.rmdir()
            confinement.group.parent.rmdir()  # when no other fleet group is there

    atexit.register(leave)


def connect(address: str, credentials: Credentials) -> None:
    """This process joins the cluster as a driver (no node of its own, no dashboard),
    authenticated with the fleet's token, listening on its address towards the head only."""
    _reachable(address)
    if ray.is_initialized():
        return
    _confine_driver(address)
    credentials.activate()
    _check_token(address, credentials)
    try:
        with _loopback_kept():
            ray.init(address=address, namespace=NAMESPACE, logging_level=logging.ERROR, log_to_driver=False)
    except AuthenticationError:
        raise UserError(f"fleet head {address}: refused the token in {credentials.token}") from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserError(f"fleet head {address}: {str(exc).splitlines()[0]}") from None


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """Ray's C++ client logs to file descriptor 2 before its exception says the same."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _check_token(address: str, credentials: Credentials) -> None:
    """One request to the head's GCS with the token: a wrong one is told at once (ray.init
    would retry for half a minute, then say only that it could not connect)."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # Ray's _raylet.pyi is partial

    try:
        with _stderr_silenced():
            GcsClient(address=address)
    except AuthenticationError:
        raise UserError(
            f"fleet head {address}: refused the token in {credentials.token} (not this fleet's credentials)"
        ) from None
    except Exception:  # not a refusal: ray.init below says what is wrong
        return


def register(name: str, scratch: str, *, simulated: bool = False) -> None:
    """Record a host's scratch root (connected to the head already)."""
    from ray.experimental.internal_kv import _internal_kv_put

    record = {"scratch": scratch, "simulated": simulated}
    _internal_kv_put(f"host:{name}", json.dumps(record), overwrite=True, namespace=NAMESPACE)


def _registered() -> dict[str, dict[str, Any]]:
    from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_list

    found = {}
    for key in _internal_kv_list("host:", namespace=NAMESPACE):
        value = _internal_kv_get(key, namespace=NAMESPACE)
        if value is not None:
            found[key.decode().removeprefix("host:")] = json.loads(value)
    return found


def joined() -> list[Host]:
    """The hosts whose node is alive now, by name."""
    records = _registered()
    hosts = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        for resource in node.get("Resources", {}):
            name = resource.removeprefix(RESOURCE_PREFIX)
            if resource.startswith(RESOURCE_PREFIX) and name in records:
                record = records[name]
                hosts.append(
                    Host(
                        name,
                        node["NodeID"],
                        record["scratch"],
                        record.get("simulated", False),
                        node.get("NodeManagerAddress", ""),
                    )
                )
    return sorted(hosts, key=lambda h: h.name)


class _Liveness:
    """Which nodes the cluster holds alive, asked of it at most every LIVENESS_S (one answer
    for every host's thread: a fleet of hundreds must not ask hundreds of times)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked = -math.inf
        self.alive: set[str] = set()

    def __call__(self, node_id: str) -> bool:
        with self.lock:
            if time.monotonic() - self.asked >= LIVENESS_S:
                self.alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
                self.asked = time.monotonic()
            return node_id in self.alive


LIVENESS_S = 2.0
alive = _Liveness()


def busy(host: Host) -> bool:
    return ray.available_resources().get(host.resource, 0) < 1


def select(wanted: str | None) -> list[Host]:
    """--hosts: a comma-separated list of names, or all (the default)."""
    hosts = joined()
    if wanted is not None and not wanted.strip(" ,"):
        raise UserError("--hosts: empty; give host names separated by commas, or all")
    if wanted is None or wanted.strip() == "all":
        if not hosts:
            raise UserError("the fleet has no hosts; run `layerbench host join HEAD` on each bench host")
        return hosts
    by_name = {h.name: h for h in hosts}
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    if unknown := [n for n in names if n not in by_name]:
        known = ", ".join(by_name) or "none"
        raise UserError(f"--hosts: no joined host {unknown[0]!r} (joined: {known})")
    if len(set(names)) != len(names):
        raise UserError("--hosts: a host is named twice")
    return [by_name[n] for n in names]


def check_name(name: str) -> None:
    if not name or set(name) - _NAME_CHARACTERS or len(name) > 63:
        raise UserError(f"--name {name!r}: letters, digits, '-', '_' and '.', at most 63")


def _start_ray(
    options: list[str], bind: str, group_name: str, credentials: Credentials
) -> list[confine.Listener]:
    """`ray start OPTIONS` in a cgroup that keeps it to bind, with the fleet's token; once
    its processes' listening sockets are steady, every one of them is checked to be on
    bind. Anything else: those processes are stopped, and the command refuses."""
    confinement = confine.Confinement.create(group_name, bind)
    bind = confinement.bind  # as Ray and /proc/net write it
    try:
        done = subprocess.run(
            [sys.executable, "-c", _RAY_START, f"--node-ip-address={bind}", *options],
            capture_output=True,
            text=True,
            env=credentials.child_environment(),
            preexec_fn=confinement.enter,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"ray start: {last}")
        found = _steady_listeners(confinement)
        if stray := confine.elsewhere(found, bind):
            raise confine.Exposed(
                f"Ray listens on {stray[0]}, not only on --bind {bind}: stopped what this command started"
            )
        if not found:
            raise UserError(f"ray start: its processes listen nowhere (its logs: {_ray_logs()})")
    except BaseException:
        confinement.stop()
        raise
    return found


def _ray_logs() -> str:
    from ray._common.utils import get_default_ray_temp_dir

    return str(Path(get_default_ray_temp_dir()) / "session_latest" / "logs")


def _steady_listeners(confinement: confine.Confinement) -> list[confine.Listener]:
    deadline = time.monotonic() + _SETTLE_S
    found = confine.listeners(confinement.pids())
    steady_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = confine.listeners(confinement.pids())
        if now != found:
            found, steady_since = now, time.monotonic()
        elif time.monotonic() - steady_since >= _STEADY_S:
            break
    return found


def start_head(bind: str, port: int, credentials: Credentials) -> list[confine.Listener]:
    """The head here: no dashboard, no trials of its own; what it listens on."""
    return _start_ray(
        [
            "--head",
            f"--port={port}",
            "--include-dashboard=false",
            "--num-cpus=0",
            "--disable-usage-stats",
            f"--system-config={json.dumps(HEALTH_CHECKS)}",
        ],
        bind,
        f"head-{port}",
        credentials,
    )


def _address_towards(address: str) -> str:
    """This machine's address on the route to the head (what Ray itself would pick)."""
    host, _, port = address.rpartition(":")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host.strip("[]"), int(port)))
        return str(probe.getsockname()[0])


def join(
    address: str, name: str, scratch: Path, bind: str | None, credentials: Credentials
) -> list[confine.Listener]:
    """This machine joins the fleet at address as host name, its trials in scratch; what
    its node listens on."""
    if os.geteuid() != 0:
        raise UserError("layerbench host join: a host runs its trials as root; run it as root")
    check_name(name)
    connect(address, credentials)
    if any(h.name == name for h in joined()):
        raise UserError(f"--name {name}: a host of that name has joined already")
    found = _start_ray(
        [
            f"--address={address}",
            f"--resources={json.dumps({RESOURCE_PREFIX + name: 1})}",
            "--num-cpus=1",
            "--disable-usage-stats",
        ],
        bind or _address_towards(address),
        f"host-{name}",
        credentials,
    )
    register(name, str(scratch))
    return found


def describe_all() -> list[tuple[Host, dict[str, Any]]]:
    """Every joined host with what it is now (a simulated one: nothing)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from layerbench.fleet.remote import describe_node

    found = joined()
    refs = {
        h.name: describe_node.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(h.node_id, soft=False)
        ).remote(h.scratch)
        for h in found
        if not h.simulated
    }
    facts = {}
    for name, ref in refs.items():
        try:
            facts[name] = ray.get(ref, timeout=60)
        except ray.exceptions.RayError:
            facts[name] = {}
    return [(h, facts.get(h.name, {})) for h in found]
