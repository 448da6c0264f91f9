"""A fleet exposes nothing: `host head --bind 127.0.0.1` and `host join ... --bind 127.0.0.1`,
the real commands, start real Ray processes that listen on 127.0.0.1 only (read here from
/proc/net/tcp and tcp6), and a client, host or task without the fleet's token gets nowhere.

Everything runs on loopback, with Ray's temporary directory under the test root (its
sessions never mix with another Ray's); afterwards exactly the processes started are
killed and that directory removed, whatever the outcome."""

import concurrent.futures
import contextlib
import ipaddress
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO, TEST_ROOT, cli, skip_unless_root

pytestmark = pytest.mark.e2e

pytest.importorskip("ray", reason="Ray is a dependency of layerbench (pyproject.toml)")

from layerbench.fleet import confine  # noqa: E402

HOST = "exposure-a"  # the host's name, unlikely to be a real fleet's on this machine
LOOPBACK = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def _session_processes(marker: str) -> set[int]:
    """Every process whose command line names marker (Ray's temporary directory of this
    test), and all their descendants (Ray's agents and workers rename themselves)."""
    parents: dict[int, int] = {}
    named = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(status.split("PPid:")[1].split()[0])
        if marker.encode() in command:
            named.add(pid)
    found = set(named)
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in found} - found
        found |= children
        grew = bool(children)
    return found - {os.getpid()}


def _listening() -> dict[int, tuple[str, int]]:
    """Socket inode -> (address, port) of each listening TCP socket, from /proc/net."""
    found = {}
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":
                continue
            address_hex, port_hex = fields[1].split(":")
            raw = bytes.fromhex(address_hex)
            address = ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)))
            found[int(fields[9])] = (str(address), int(port_hex, 16))
    return found


def _listeners_of(pids: set[int]) -> list[tuple[int, str, str, int]]:
    """(pid, command name, address, port) of every listening socket these processes hold."""
    sockets = _listening()
    found = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            for descriptor in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(descriptor)
                    if target.startswith("socket:[") and int(target[8:-1]) in sockets:
                        found.add((pid, name, *sockets[int(target[8:-1])]))
    return sorted(found)


def _credentials(directory: Path, token: str) -> Path:
    directory.mkdir(mode=0o700, parents=True)
    os.chmod(directory, 0o700)
    (directory / "token").write_text(token)
    os.chmod(directory / "token", 0o600)
    return directory


@pytest.fixture(scope="module")
def loopback_fleet() -> Iterator[dict[str, Any]]:
    """One head and one host for the module: its tests only look and knock, none stops them."""
    skip_unless_root("the fleet's control groups and Ray's processes")
    # Short: Ray's Unix sockets live under it, and their paths may not pass 107 bytes.
    root = TEST_ROOT / "fx"
    with contextlib.suppress(FileNotFoundError):
        subprocess.run(["rm", "-rf", str(root)], check=True)
    root.mkdir(parents=True)
    port = _free_port()
    env = {**os.environ, "RAY_TMPDIR": str(root)}
    groups = [f"head-{port}", f"host-{HOST}"]
    fleet = {"root": root, "port": port, "env": env, "credentials": root / "credentials"}
    try:
        head = cli(
            "host", "head", "--bind", LOOPBACK, "--port", str(port),
            "--credentials", str(fleet["credentials"]), env=env, timeout=180,
        )  # fmt: skip
        assert head.returncode == 0, head.stderr
        fleet["head"] = head
        joined = cli(
            "host", "join", f"{LOOPBACK}:{port}", "--name", HOST, "--scratch", str(root / "scratch"),
            "--bind", LOOPBACK, "--credentials", str(fleet["credentials"]), env=env, timeout=180,
        )  # fmt: skip
        assert joined.returncode == 0, joined.stderr
        fleet["join"] = joined
        yield fleet
    finally:
        started = _session_processes(str(root))
        for name in groups:  # exactly what the two commands started: their cgroups' processes
            group = confine.Confinement(Path(_unified()) / confine.PARENT / name, LOOPBACK)
            started |= set(group.pids())
            group.stop()
        for pid in started:  # a process that left its cgroup (none should) is still ours
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        deadline = time.monotonic() + 10
        while _session_processes(str(root)) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _session_processes(str(root))
        subprocess.run(["rm", "-rf", str(root)], check=False)
        assert not left, f"processes of the test's Ray session still run: {left}"
        assert not root.exists()


def _unified() -> str:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.startswith("cgroup2 "):
            return left.split()[4]
    raise AssertionError("no cgroup v2 tree")


def test_head_and_host_listen_on_the_bind_address_only(loopback_fleet: dict) -> None:
    port = loopback_fleet["port"]
    listed = cli(
        "host", "list", f"{LOOPBACK}:{port}", "--credentials", str(loopback_fleet["credentials"]),
        env=loopback_fleet["env"], timeout=180,
    )  # fmt: skip
    assert listed.returncode == 0 and HOST in listed.stdout and "idle" in listed.stdout, listed.stderr
    found = _listeners_of(_session_processes(str(loopback_fleet["root"])))
    print("listening:", *(f"{name}({pid}) {address}:{p}" for pid, name, address, p in found), sep="\n  ")
    names = [name for _, name, _, _ in found]
    # The head's GCS on the given port, a raylet for the head and one for the host (each with
    # its node and object managers), and each node's runtime-env agent.
    assert any(name == "gcs_server" and p == port for _, name, _, p in found), found
    assert len({pid for pid, name, _, _ in found if name == "raylet"}) == 2, found
    assert names.count("raylet") >= 4 and any(name.startswith("ray::RuntimeEnv") for name in names), found
    assert {address for _, _, address, _ in found} == {LOOPBACK}, found  # not *, not ::, not eth0
    assert f"every one on {LOOPBACK}" in " ".join(
        (loopback_fleet["head"].stdout + loopback_fleet["head"].stderr).split()
    )
    assert f"every one on {LOOPBACK}" in " ".join(
        (loopback_fleet["join"].stdout + loopback_fleet["join"].stderr).split()
    )


_DRIVER = """
import sys
import ray
import ray._private.services as services
services.resolve_ip_for_localhost = lambda host: host  # the head is on loopback, as given
ray.init(address=sys.argv[1], logging_level="ERROR")
print("connected", flush=True)
print("task ran:", ray.get(ray.remote(lambda: 42).options(num_cpus=0).remote(), timeout=60), flush=True)
"""

_GCS_CLIENT = """
import sys
from ray._raylet import GcsClient
GcsClient(address=sys.argv[1])
print("the GCS answered", flush=True)
"""


def _ray_client(
    code: str, address: str, token_path: Path | None, env: dict[str, str]
) -> subprocess.CompletedProcess:
    """A Ray client of its own, with the token at token_path or with none at all."""
    client_env = {k: v for k, v in env.items() if not k.startswith("RAY_AUTH")}
    client_env["RAY_gcs_rpc_server_connect_timeout_s"] = "5"  # a refused driver gives up soon
    if token_path is not None:
        client_env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path)}
    else:
        client_env["HOME"] = "/nonexistent"  # no ~/.ray/auth_token either
    return subprocess.run(
        [sys.executable, "-c", code, address], capture_output=True, text=True, timeout=120, env=client_env
    )


def test_without_the_fleets_token_nothing_connects_or_runs(loopback_fleet: dict, tmp_path: Path) -> None:
    port, env = loopback_fleet["port"], loopback_fleet["env"]
    address = f"{LOOPBACK}:{port}"
    token = loopback_fleet["credentials"] / "token"
    assert (
        token.stat().st_mode & 0o777 == 0o600
        and loopback_fleet["credentials"].stat().st_mode & 0o777 == 0o700
    )
    wrong = _credentials(tmp_path / "wrong", secrets.token_hex(32))
    readable = _credentials(tmp_path / "readable", token.read_text())
    os.chmod(readable / "token", 0o644)
    ours = (
        ("host", "list", address),
        ("host", "join", address, "--name", "intruder", "--scratch", str(tmp_path / "s"), "--bind", LOOPBACK),
        ("run", str(REPO / "examples" / "command.toml"), "--fleet", address, "--db", str(tmp_path / "r.db")),
    )
    # Every client below is a process of its own that waits on the head, mostly for a
    # refusal's timeout: they run side by side (4 at a time), and are judged one by one.
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        with_wrong = [
            pool.submit(cli, *command, "--credentials", str(wrong), env=env, timeout=120) for command in ours
        ]
        with_readable = pool.submit(
            cli, "host", "list", address, "--credentials", str(readable), env=env, timeout=120
        )
        with_none = pool.submit(
            cli, "host", "list", address, "--credentials", str(tmp_path / "none"), env=env, timeout=120
        )
        refused = [
            (
                pool.submit(_ray_client, _DRIVER, address, path, env),
                pool.submit(_ray_client, _GCS_CLIENT, address, path, env),
            )
            for path in (None, wrong / "token")
        ]
        allowed = (
            pool.submit(_ray_client, _DRIVER, address, token, env),
            pool.submit(_ray_client, _GCS_CLIENT, address, token, env),
        )

    # Layerbench's own clients and hosts: one line, exit 2, nothing started.
    for command, future in zip(ours, with_wrong, strict=True):
        done = future.result()
        assert done.returncode == 2 and done.stderr.count("\n") == 1, (command, done.stderr)
        assert "refused the token" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (Path(_unified()) / confine.PARENT / "host-intruder").exists()

    # Credentials others could read are refused before anything is sent.
    done = with_readable.result()
    assert done.returncode == 2 and "readable by group or others" in done.stderr, done.stderr
    missing = with_none.result()
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr

    # Ray's own clients: a driver without the token, or with a wrong one, connects to nothing
    # and runs nothing; the GCS refuses it as unauthenticated. With the token, both work.
    for driver_future, gcs_future in refused:
        driver = driver_future.result()
        assert driver.returncode != 0 and "task ran" not in driver.stdout, driver.stdout
        assert "Unauthenticated" in driver.stderr, driver.stderr[-2000:]
        gcs = gcs_future.result()
        assert gcs.returncode != 0 and "answered" not in gcs.stdout and "Authentication" in gcs.stderr
    driver = allowed[0].result()
    assert driver.returncode == 0 and "task ran: 42" in driver.stdout, driver.stderr[-2000:]
    assert "answered" in allowed[1].result().stdout

    # Each node's runtime-env agent (HTTP): 401 without the token, served with it.
    found = _listeners_of(_session_processes(str(loopback_fleet["root"])))
    agents = [p for _, name, _, p in found if name.startswith("ray::RuntimeEnv")]
    assert len(agents) == 2, found
    for agent_port in agents:
        url = f"http://{LOOPBACK}:{agent_port}/get_or_create_runtime_env"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=10)
        assert refused.value.code == 401
        authorized = urllib.request.Request(
            url, data=b"", method="POST", headers={"Authorization": f"Bearer {token.read_text().strip()}"}
        )
        with urllib.request.urlopen(authorized, timeout=10) as answer:
            assert answer.status == 200
