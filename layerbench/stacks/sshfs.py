"""sshfs: the layer below served over a real ssh connection on loopback, the network file
system this machine can run. layerbench starts its own sshd for the trial: on 127.0.0.1 on a
free port, with a host key and a client key made in the trial's directory, accepting only
that key and only SFTP. Both daemons are journaled and stopped (sshfs first, then sshd), and
their CPU, the ssh client's and the server session's included, is recorded as helper CPU:
the encryption is the layer's cost.

sshd runs in a mount namespace of its own with a tmpfs over /run, where it finds the empty
privilege separation directory it insists on: nothing outside the scratch root is touched,
and the host's /run (with or without a system sshd) is left as it is."""

import contextlib
import functools
import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import field_validator

from layerbench.core.errors import SetupError
from layerbench.linux import procfs, system
from layerbench.stacks.base import BuildContext, Exposed, LayerOptions, register
from layerbench.stacks.fuse import FuseDaemonLayer, one_option_each

SSHD = "/usr/sbin/sshd"  # sshd re-executes itself, so it must be started by its full path
_LISTEN_WAIT_S = 10.0


class SshfsOptions(LayerOptions):
    dir_cache: bool = True  # sshfs's cache of names and attributes (its default: on)
    direct_io: bool = False  # bypass the page cache: every read and write crosses the wire
    compression: bool = False  # ssh's zlib compression
    cipher: str | None = None  # ssh's cipher, e.g. "aes128-gcm@openssh.com"; None: ssh's choice
    multithreaded: bool = True  # False: sshfs -s, one request at a time
    options: list[str] = []  # further sshfs -o options, one per item, e.g. ["max_conns=4"]

    @field_validator("options")
    @classmethod
    def _one_each(cls, values: list[str]) -> list[str]:
        return one_option_each(values)

    @field_validator("cipher")
    @classmethod
    def _cipher(cls, value: str | None) -> str | None:
        if value is not None:
            known = ssh_ciphers()
            if known and value not in known:
                raise ValueError(f"cipher {value!r}: this ssh knows {', '.join(known)}")
        return value


@functools.cache
def ssh_ciphers() -> tuple[str, ...]:
    """The ciphers this machine's ssh offers (empty when ssh is missing: doctor says so)."""
    try:
        done = subprocess.run(
            ["ssh", "-Q", "cipher"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(done.stdout.split()) if done.returncode == 0 else ()


def sshd_config(port: int, host_key: Path, authorized: Path) -> str:
    """A server for this trial only: loopback, one key, SFTP and nothing else."""
    return "\n".join(
        [
            f"ListenAddress 127.0.0.1:{port}",
            f"HostKey {host_key}",
            f"AuthorizedKeysFile {authorized}",
            "PidFile none",
            "AllowUsers root@127.0.0.1",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",  # the keys sit in the scratch root, not in ~/.ssh
            "AllowTcpForwarding no",
            "AllowAgentForwarding no",
            "X11Forwarding no",
            "PermitTunnel no",
            "Subsystem sftp internal-sftp",
            "ForceCommand internal-sftp",
            "LogLevel ERROR",
            "",
        ]
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _keygen(path: Path) -> str:
    system.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "layerbench trial", "-f", str(path)])
    return path.with_suffix(".pub").read_text().strip()


@register
class SshfsLayer(FuseDaemonLayer[SshfsOptions]):
    kind = "sshfs"
    Options = SshfsOptions
    summary = (
        "the layer below over ssh on loopback: sshfs to an sshd of the trial's own; their CPU is counted"
    )
    tools = ("sshfs", "ssh", "ssh-keygen", SSHD, "unshare", "umount")
    filesystems = ("fuse",)
    daemon_name = "sshfs"
    _client: tuple[int, Path, Path] | None = None  # port, client key, known_hosts

    def daemon_argv(self, source: Path, target: Path) -> list[str]:
        options = self.options
        assert self._client is not None, "the server is started first"
        port, key, known = self._client
        ssh = [
            f"port={port}",
            f"IdentityFile={key}",
            "IdentitiesOnly=yes",
            f"UserKnownHostsFile={known}",
            "GlobalKnownHostsFile=/dev/null",
            "StrictHostKeyChecking=yes",
            "BatchMode=yes",
        ]
        if options.cipher:
            ssh.append(f"Ciphers={options.cipher}")
        fuse = ["ro"] if options.readonly else []
        fuse += [f"dir_cache={'yes' if options.dir_cache else 'no'}"]
        fuse += ["direct_io"] if options.direct_io else []
        fuse += ["compression=yes"] if options.compression else []
        threads = [] if options.multithreaded else ["-s"]
        return [
            "sshfs", "-f", *threads, "-F", "/dev/null",
            "-o", ",".join([*ssh, *fuse, *options.options]),
            f"root@127.0.0.1:{source}", str(target),
        ]  # fmt: skip

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        keys = ctx.subdir(f"L{self.index}-ssh")
        host_public = _keygen(keys / "host_key")
        client_public = _keygen(keys / "client_key")
        (keys / "authorized_keys").write_text(f"restrict {client_public}\n")
        with self._server(ctx, keys) as (port, server_pid):
            (keys / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_public}\n")
            self._client = (port, keys / "client_key", keys / "known_hosts")
            with super().expose(ctx, below) as exposed:
                # The ssh client under sshfs and the server's session do the crypto: theirs too.
                helpers = [*exposed.helper_pids, server_pid]
                helpers += [p for pid in list(helpers) for p in procfs.descendants(pid)]
                exposed.helper_pids = list(dict.fromkeys(helpers))
                exposed.mount_lines = [
                    f"{line} [sshd pid {server_pid} on 127.0.0.1:{port}]" for line in exposed.mount_lines
                ]
                yield exposed

    @contextlib.contextmanager
    def _server(self, ctx: BuildContext, keys: Path) -> Iterator[tuple[int, int]]:
        config, log = keys / "sshd_config", keys / "sshd.log"
        for _attempt in range(3):  # a free port can be taken between the probe and sshd's bind
            port = _free_port()
            config.write_text(sshd_config(port, keys / "host_key", keys / "authorized_keys"))
            # sshd -t checks the config (a bad one fails here, in sshd's words) and the privilege
            # separation directory as the daemon will: in the same namespace.
            system.run(_with_own_run([SSHD, "-t", "-f", str(config)]))
            argv = _with_own_run([SSHD, "-D", "-e", "-f", str(config)])
            with ctx.scratch.process(_starter(argv, log), f"sshd {config}", named=config) as daemon:
                if _wait_listening(port, daemon):
                    yield port, daemon.pid
                    return
            said = log.read_text(errors="replace").strip()
            if "Address already in use" not in said:
                raise SetupError(f"sshd did not start: {said.splitlines()[-1] if said else 'no output'}")
        raise SetupError("sshd could not bind a free port on 127.0.0.1 in 3 tries")


def _with_own_run(command: list[str]) -> list[str]:
    """command in a mount namespace of its own with an empty tmpfs over /run holding the
    /run/sshd that sshd requires; the namespace, and the tmpfs, go with the process."""
    script = (
        "mount -t tmpfs -o size=1M,mode=755 layerbench-sshd /run && mkdir /run/sshd && exec "
        + shlex.join(command)
    )
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script]


def _starter(argv: list[str], log: Path) -> Callable[[], subprocess.Popen[bytes]]:
    def start() -> subprocess.Popen[bytes]:
        with open(log, "wb") as handle:
            # Its own session: a Ctrl-C at the terminal reaches layerbench, which stops the
            # daemons in order.
            return subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=handle, stderr=handle, start_new_session=True
            )

    return start


def _wait_listening(port: int, daemon: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + _LISTEN_WAIT_S
    while time.monotonic() < deadline:
        if _listening(port):
            return True
        if daemon.poll() is not None:
            return False
        time.sleep(0.02)
    return False
