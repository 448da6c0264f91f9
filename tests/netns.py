"""Hosts of a fleet on this one machine, each in a network namespace of its own.

`network(count)` makes a switch namespace holding a bridge, and `count` host namespaces,
each joined to the bridge by a veth pair and given one address of the project's test
network (10.213.0.0/24); nothing of it is in this machine's own namespace, which keeps no
address, route or link of it. A host's commands run there through `nsenter --net` (not `ip
netns exec`: that remounts /sys, and with it the cgroup v2 tree the fleet's bind filter
needs). `Host.cut_off()` takes its link down at the switch, `Host.reconnect()` brings it back.

Everything made is removed when the context ends, also when the test fails: the processes
started in the namespaces (with each fleet cgroup the commands made), the namespaces with
their links (a veth pair goes with its namespace), and the directories given to Ray."""

import contextlib
import ipaddress
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from layerbench.fleet import confine

NETWORK = ipaddress.ip_network("10.213.0.0/24")
BRIDGE = "lbbr0"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Host:
    """One namespace of the test network: its name, address and the switch's end of its link."""

    namespace: str
    address: str
    switch: str
    switch_port: str
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    def command(self, *argv: str) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.namespace}", "--", *argv]

    def run(self, *argv: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(*argv), capture_output=True, text=True, env=env, timeout=timeout)

    def start(self, *argv: str, env: dict[str, str]) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            self.command(*argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.processes.append(child)
        return child

    def cut_off(self) -> None:
        _ip("-n", self.switch, "link", "set", self.switch_port, "down")

    def reconnect(self) -> None:
        _ip("-n", self.switch, "link", "set", self.switch_port, "up")

    def pids(self) -> set[int]:
        """Every process in this namespace (read from /proc: /proc/PID/ns/net of each)."""
        try:
            target = os.stat(f"/run/netns/{self.namespace}").st_ino
        except FileNotFoundError:
            return set()
        found = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.stat(entry / "ns" / "net").st_ino == target:
                        found.add(int(entry.name))
        return found


def _kill_all(pids: set[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _fleet_groups_of(pids: set[int]) -> set[Path]:
    """The fleet cgroups (layerbench-fleet/*) these processes are in."""
    unified = confine._unified_mount()
    groups = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                if line.startswith("0::/" + confine.PARENT + "/"):
                    groups.add(unified / line[3:].lstrip("/"))
    return groups


@contextlib.contextmanager
def network(count: int, tag: str) -> Iterator[list[Host]]:
    """count hosts (10.213.0.1, .2, ...) on one switch; tag keeps the names apart from
    another test's (short: interface names hold 15 characters)."""
    switch = f"lb{tag}sw"
    made: list[Host] = []
    groups: set[Path] = set()
    with contextlib.ExitStack() as cleanup:

        def remove_namespace(name: str) -> None:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)

        def stop_everything() -> None:
            """What runs in the namespaces, its fleet cgroups, then the namespaces."""
            for host in made:
                for child in host.processes:
                    with contextlib.suppress(ProcessLookupError):
                        child.kill()
            # SIGTERM first: a host's agent then tears its trial down; what is left is killed.
            pids = set().union(*(host.pids() for host in made))
            groups.update(_fleet_groups_of(pids))
            _kill_all(pids, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                pids = set().union(*(host.pids() for host in made))
                groups.update(_fleet_groups_of(pids))
                if not pids:
                    break
                if time.monotonic() > deadline - 20:
                    _kill_all(pids, signal.SIGKILL)
                time.sleep(0.1)
            for group in groups:  # what left the namespaces' processes behind (none should)
                confine.Confinement(group, "127.0.0.1").stop()
            for host in made:
                for child in host.processes:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.communicate(timeout=10)

        _ip("netns", "add", switch)
        cleanup.callback(remove_namespace, switch)
        _ip("-n", switch, "link", "add", BRIDGE, "type", "bridge")
        _ip("-n", switch, "link", "set", BRIDGE, "up")
        for index in range(count):
            name, port = f"lb{tag}h{index}", f"p{index}"
            address = str(NETWORK.network_address + 1 + index)
            _ip("netns", "add", name)
            cleanup.callback(remove_namespace, name)
            _ip("-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", switch)
            _ip("-n", name, "addr", "add", f"{address}/{NETWORK.prefixlen}", "dev", "eth0")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "link", "set", "eth0", "up")
            _ip("-n", switch, "link", "set", port, "master", BRIDGE)
            _ip("-n", switch, "link", "set", port, "up")
            made.append(Host(name, address, switch, port))
        cleanup.callback(stop_everything)  # before the namespaces go (callbacks run last first)
        yield made


def listening(host: Host, pids: set[int]) -> list[confine.Listener]:
    """The listening TCP sockets these processes hold, read in the host's namespace (its
    /proc/PID/net tables; /proc/net would be this test's own namespace)."""
    sockets: dict[int, tuple[str, int]] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            sockets |= _listening_in(Path(f"/proc/{pid}/net"))
            break
    found = []
    for pid in pids:
        with contextlib.suppress(OSError):
            command = Path(f"/proc/{pid}/comm").read_text().strip()
            for descriptor in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(descriptor)
                    if target.startswith("socket:[") and (inode := int(target[8:-1])) in sockets:
                        found.append(confine.Listener(pid, command, *sockets[inode]))
    return sorted(set(found), key=lambda listener: (listener.port, listener.pid))


def _listening_in(tables: Path) -> dict[int, tuple[str, int]]:
    found = {}
    for table in ("tcp", "tcp6"):
        for line in (tables / table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            hex_address, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_address)
            address = ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)))
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
                address = address.ipv4_mapped
            found[int(fields[9])] = (str(address), int(hex_port, 16))
    return found
