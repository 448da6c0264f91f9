"""The cgroup BPF filter that keeps a fleet's processes to one address, and the refusal
when a process of the fleet listens anywhere else (real processes, loopback only)."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from layerbench.cli import main
from layerbench.fleet import confine, hosts

_BINDS = """
import socket
def bind(family, address, v6only=None):
    listener = socket.socket(family)
    if v6only is not None:
        listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6only)
    try:
        listener.bind((address, 0))
    except OSError as exc:
        return exc.strerror
    return listener.getsockname()[0]
print(bind(socket.AF_INET, "0.0.0.0"))
print(bind(socket.AF_INET6, "::", 0))
print(bind(socket.AF_INET, "127.0.0.2"))
print(bind(socket.AF_INET, "127.0.0.3"))
print(bind(socket.AF_INET6, "::1"))
"""


def test_a_wildcard_bind_lands_on_the_address_and_any_other_is_refused(needs_root: None) -> None:
    group = confine.Confinement.create(f"test-{os.getpid()}", "127.0.0.2")
    try:
        done = subprocess.run(
            [sys.executable, "-c", _BINDS], capture_output=True, text=True, preexec_fn=group.enter, timeout=60
        )
        assert done.stdout.split("\n")[:5] == [
            "127.0.0.2",
            "::ffff:127.0.0.2",
            "127.0.0.2",
            "Operation not permitted",
            "Operation not permitted",
        ], done.stderr
        # The same binds outside the group: the wildcard stays the wildcard (the filter did it).
        free = subprocess.run([sys.executable, "-c", _BINDS], capture_output=True, text=True, timeout=60)
        assert free.stdout.split("\n")[:2] == ["0.0.0.0", "::"], free.stderr
    finally:
        group.stop()
    assert not group.group.exists()


_DAEMON = """
import os, socket, sys, time
if os.fork():
    sys.exit(0)  # as `ray start` does: it returns, its servers stay
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for descriptor in (0, 1, 2):  # as Ray's servers do: the caller's pipes close
    os.dup2(null, descriptor)
kept = []
for address in ("127.0.0.1", "127.0.0.3"):
    listener = socket.socket()
    listener.bind((address, 0))
    listener.listen()
    kept.append(listener)
open(os.environ["LISTENING_AT"], "w").write(" ".join(str(s.getsockname()[1]) for s in kept))
time.sleep(600)
"""


def test_a_process_listening_elsewhere_is_refused_stopped_and_named(
    needs_root: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As if Ray got past the filter (a kernel without it, say): `host head` names the socket,
    stops what it started and exits 1."""
    monkeypatch.setattr(confine, "_inet4_program", lambda bind: _allow_all())
    monkeypatch.setattr(confine, "_inet6_program", lambda bind: _allow_all())
    monkeypatch.setattr(hosts, "_RAY_START", _DAEMON)
    monkeypatch.setattr(hosts, "_STEADY_S", 0.5)
    monkeypatch.setenv("LISTENING_AT", str(tmp_path / "ports"))
    port = 40000 + os.getpid() % 20000
    status = main(
        ["host", "head", "--bind", "127.0.0.1", "--port", str(port), "--credentials", str(tmp_path / "c")]
    )
    error = capsys.readouterr().err
    ports = (tmp_path / "ports").read_text().split()
    assert status == 1 and error.count("\n") == 1, error
    assert f"127.0.0.3:{ports[1]}" in error and "not only on --bind 127.0.0.1" in error, error
    at = [("127.0.0.1", int(ports[0])), ("127.0.0.3", int(ports[1]))]
    deadline = time.monotonic() + 10
    while any(map(_listening, at)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(map(_listening, at))  # stopped
    assert not (Path(confine._unified_mount()) / confine.PARENT / f"head-{port}").exists()


def _allow_all() -> bytes:
    program = confine._Program()
    program.finish(1)
    return program.bytecode()


def _listening(address: tuple[str, int]) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(address) == 0


def test_credentials_are_refused_when_others_could_read_them(tmp_path: Path) -> None:
    from layerbench.core.errors import UserError
    from layerbench.fleet import credentials

    made = credentials.create(tmp_path / "fleet")
    assert made.directory.stat().st_mode & 0o777 == 0o700 and made.token.stat().st_mode & 0o777 == 0o600
    assert credentials.create(tmp_path / "fleet").token.read_text() == made.token.read_text()  # kept
    os.chmod(made.directory, 0o750)
    with pytest.raises(UserError, match="readable by group or others"):
        credentials.load(made.directory)
    os.chmod(made.directory, 0o700)
    os.chmod(made.token, 0o640)
    with pytest.raises(UserError, match="readable by group or others"):
        credentials.load(made.directory)
    os.chmod(made.token, 0o600)
    made.token.write_text("short")
    with pytest.raises(UserError, match="holds no token"):
        credentials.load(made.directory)
