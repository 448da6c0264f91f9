"""The hosts of a fleet: a Ray cluster whose bench nodes each carry one `lb-host:NAME`
resource, with the host's scratch root recorded in the cluster's key-value store.

`layerbench host head` starts the head (dashboard off, health checks tuned so that a lost
host is noticed in seconds); `layerbench host join HEAD` makes this machine a host;
`layerbench host list` shows them. Ray has no authentication: the cluster must sit on a
trusted network (see the README)."""

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from layerbench.errors import UserError
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


def _ray_command() -> list[str]:
    found = shutil.which("ray") or str(Path(sys.executable).parent / "ray")
    return [found] if Path(found).exists() else [sys.executable, "-m", "ray.scripts.scripts"]


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


def connect(address: str) -> None:
    """This process joins the cluster as a driver (no node of its own, no dashboard)."""
    _reachable(address)
    if ray.is_initialized():
        return
    try:
        ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserError(f"fleet head {address}: {str(exc).splitlines()[0]}") from None


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


def head(bind: str, port: int) -> list[str]:
    """The command that starts the head here: no dashboard, no trials of its own."""
    return [
        *_ray_command(),
        "start",
        "--head",
        f"--node-ip-address={bind}",
        f"--port={port}",
        "--include-dashboard=false",
        "--num-cpus=0",
        "--disable-usage-stats",
        f"--system-config={json.dumps(HEALTH_CHECKS)}",
    ]


def join(address: str, name: str, scratch: Path, bind: str | None) -> None:
    """This machine joins the fleet at address as host name, its trials in scratch."""
    if os.geteuid() != 0:
        raise UserError("layerbench host join: a host runs its trials as root; run it as root")
    check_name(name)
    connect(address)
    if any(h.name == name for h in joined()):
        raise UserError(f"--name {name}: a host of that name has joined already")
    command = [
        *_ray_command(),
        "start",
        f"--address={address}",
        f"--resources={json.dumps({RESOURCE_PREFIX + name: 1})}",
        "--num-cpus=1",
        "--disable-usage-stats",
    ]
    if bind:
        command.append(f"--node-ip-address={bind}")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"ray start --address={address}: {last}")
    register(name, str(scratch))


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
