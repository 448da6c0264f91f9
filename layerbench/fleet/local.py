"""A fleet on this one machine: a Ray head (no trials of its own) and nodes that carry the
hosts' resources, all on loopback, authenticated with a fresh token and kept to 127.0.0.1 by
the fleet's bind filter, exactly as `host head`/`host join` keep a real fleet. The e2e tests and
the fleet benches run on it; nothing of it listens beyond this machine, and everything is gone
when the `with` ends, however it ends.

The calling process stays in the fleet's cgroup while the fleet lasts (every node it starts, and
every command it runs, is kept to loopback too) and keeps the fleet's token in its environment."""

import contextlib
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerbench.core.errors import UserError
from layerbench.fleet import confine, credentials, hosts

LOOPBACK = "127.0.0.1"


@dataclass
class LocalFleet:
    address: str
    credentials: credentials.Credentials
    cluster: Any  # ray.cluster_utils.Cluster
    nodes: dict[str, Any]  # host name -> the node that carries its resource


def _own_group() -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return confine._unified_mount() / line[3:].lstrip("/")
    raise RuntimeError("this process is in no cgroup v2 group")


@contextlib.contextmanager
def _environment_kept(names: Sequence[str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _confined(name: str) -> Iterator[None]:
    home = _own_group()
    group = confine.Confinement.create(name, LOOPBACK)
    group.enter()
    try:
        yield
    finally:
        (home / "cgroup.procs").write_text(str(os.getpid()))
        group.stop()


@contextlib.contextmanager
def loopback_credentials(root: Path) -> Iterator[credentials.Credentials]:
    """The fleet's credentials (root/credentials, made if missing), active in this process,
    and this process in a cgroup kept to loopback: what every node started here inherits."""
    fleet_credentials = credentials.create(root / "credentials")
    with _environment_kept(list(fleet_credentials.environment())), _confined(f"local-{os.getpid()}"):
        fleet_credentials.activate()
        yield fleet_credentials


# Ray's Unix sockets lie under its temporary directory, at SESSION/sockets/NAME: about 66
# bytes below it (a session's name holds its date, time and pid), and a socket's path may not
# pass 107 bytes.
_RAY_SOCKET_SUFFIX = len("/session_2026-12-04_17-25-03_123456_4194304/sockets/plasma_store")
_SOCKET_PATH_MAX = 107


def ray_temp_dir(scratch: Path) -> Path:
    """Ray's temporary directory for a fleet whose scratch lies under scratch: scratch/ray."""
    temporary = scratch.absolute() / "ray"
    if len(str(temporary).encode()) + _RAY_SOCKET_SUFFIX > _SOCKET_PATH_MAX:
        limit = _SOCKET_PATH_MAX - _RAY_SOCKET_SUFFIX - len("/ray")
        raise UserError(f"{scratch}: too long a path for Ray's sockets under it (at most {limit} characters)")
    return temporary


@contextlib.contextmanager
def loopback_cluster(
    fleet_credentials: credentials.Credentials,
    node_hosts: Sequence[Sequence[str]],
    scratch: Path,
    *,
    cpus_per_node: int = 1,
    simulated: bool = False,
    stay_connected: bool = True,
) -> Iterator[LocalFleet]:
    """A head and one node per entry of node_hosts, carrying those hosts' resources, each host
    registered with its scratch root scratch/NAME. Unless stay_connected, this process leaves
    the cluster once the hosts are registered (its commands then connect on their own).

    Ray's temporary directory (its sessions, logs and sockets, and the file that points
    `ray.init()` at this cluster) is scratch/ray, removed with the cluster: in Ray's default,
    /tmp/ray, a session directory of every fleet ever started here was left behind."""
    temporary = ray_temp_dir(scratch)
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, temporary, ignore_errors=True)
        # Ray takes its directory from RAY_TMPDIR wherever it is not told one (its cluster
        # helper writes the address file to the default directory whatever it is told).
        stack.enter_context(_environment_kept(["RAY_TMPDIR"]))
        os.environ["RAY_TMPDIR"] = str(temporary.parent)
        cluster = _cluster(
            fleet_credentials,
            node_hosts,
            scratch,
            cpus_per_node=cpus_per_node,
            simulated=simulated,
            stay_connected=stay_connected,
        )
        yield stack.enter_context(cluster)


@contextlib.contextmanager
def _cluster(
    fleet_credentials: credentials.Credentials,
    node_hosts: Sequence[Sequence[str]],
    scratch: Path,
    *,
    cpus_per_node: int,
    simulated: bool,
    stay_connected: bool,
) -> Iterator[LocalFleet]:
    import ray
    from ray.cluster_utils import Cluster

    loopback: dict[str, Any] = {"node_ip_address": LOOPBACK}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": False,
            "_system_config": hosts.HEALTH_CHECKS,
            **loopback,
        },
    )
    try:
        nodes = {}
        for names in node_hosts:
            resources = {f"lb-host:{name}": 1 for name in names}
            node = cluster.add_node(num_cpus=cpus_per_node, resources=resources, **loopback)
            nodes.update(dict.fromkeys(names, node))
        cluster.wait_for_nodes()
        hosts.connect(cluster.address, fleet_credentials)
        for name in nodes:
            hosts.register(name, str(scratch / name), simulated=simulated)
        if not stay_connected:
            ray.shutdown()
        yield LocalFleet(cluster.address, fleet_credentials, cluster, nodes)
    finally:
        ray.shutdown()
        cluster.shutdown()


@contextlib.contextmanager
def local_fleet(root: Path, node_hosts: Sequence[Sequence[str]], **options: Any) -> Iterator[LocalFleet]:
    """loopback_credentials and loopback_cluster together, the hosts' scratch roots under root."""
    with contextlib.ExitStack() as stack:
        fleet_credentials = stack.enter_context(loopback_credentials(root))
        yield stack.enter_context(loopback_cluster(fleet_credentials, node_hosts, root, **options))
