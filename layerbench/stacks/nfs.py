"""nfs: the layer below exported by the kernel's NFS server and mounted back over loopback,
the cost of the network file system without the network.

The server is the trial's own: rpcbind, rpc.mountd and the kernel's nfsd threads run in a
network namespace and a mount namespace of their own (a tmpfs over /run and /var/lib/nfs,
nfsd's control file system mounted there), so a host's own NFS server, its exports and its
rpcbind are never seen or touched. The client mounts from that network namespace, into the
trial's mount namespace. NFSv3 mounts without the lock manager (`nolock`: no statd).

The host's kernel here has no nfsd: put the layer above a vm layer, whose guest loads nfsd,
nfsv3 and nfsv4 at boot."""

import contextlib
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from layerbench.core.errors import SetupError
from layerbench.core.facts import Fact, declare
from layerbench.core.sizes import SizeText, parse_size
from layerbench.linux import system
from layerbench.linux.mounts import mount_of
from layerbench.scratch import resources
from layerbench.stacks.base import BuildContext, Exposed, Layer, LayerOptions, register

RPC_CALLS = Fact("nfs_rpc_calls", "during", "nfs: RPC calls the NFS client sent over the timed run", int)
RETRANSMISSIONS = Fact(
    "nfs_retransmissions", "during", "nfs: RPC calls the NFS client sent again over the timed run", int
)
declare(RPC_CALLS, RETRANSMISSIONS)

_READY_WAIT_S = 60.0  # rpcbind, mountd and nfsd threads under tcg
_LEASE_S = 10  # nfsd's shortest NFSv4 lease and grace period (a grace nfsdcld cannot skip)

# The server, in its own network and mount namespaces ($1: the layer's state directory in the
# scratch root, its working directory; the daemons are this shell's children, one group).
_SERVER = r"""set -e
cd "$1"
ip link set lo up
mount -t tmpfs -o size=8M,mode=755 layerbench-nfs /run
mount -t tmpfs -o size=8M,mode=755 layerbench-nfs /var/lib/nfs
mkdir -p /run/rpcbind /var/lib/nfs/v4recovery /var/lib/nfs/sm
: > /var/lib/nfs/etab
: > /var/lib/nfs/rmtab
mount -t nfsd nfsd /proc/fs/nfsd
# nfsdcld tracks the server's NFSv4 clients: a new server with none to reclaim skips its
# grace period, instead of refusing opens for 10 s (13 s of a client's retries under tcg).
mkdir -p /var/lib/nfs/rpc_pipefs /var/lib/nfs/nfsdcld
mount -t rpc_pipefs rpc_pipefs /var/lib/nfs/rpc_pipefs
nfsdcld -F -p /var/lib/nfs/rpc_pipefs -s /var/lib/nfs/nfsdcld &
echo {lease} > /proc/fs/nfsd/nfsv4leasetime
echo {lease} > /proc/fs/nfsd/nfsv4gracetime
rpcbind -f &
exportfs -o {options} 127.0.0.1:{export}
rpc.mountd -F &
rpc.nfsd {threads}
cat /proc/fs/nfsd/v4_end_grace > grace 2>/dev/null || :  # Y: the grace period is over
: > ready
wait
"""


class NfsOptions(LayerOptions):
    vers: Literal["3", "4.0", "4.1", "4.2"] = "4.2"
    proto: Literal["tcp", "udp"] = "tcp"  # udp: NFSv3 only, if the client kernel still has it
    sync: bool = True  # the export's sync (the default) or async: replies before data is stable
    rsize: SizeText | None = None  # the client's read and write sizes; None: negotiated (1M)
    wsize: SizeText | None = None
    actimeo: int | None = Field(default=None, ge=0, le=3600)  # attribute cache, s; 0: none
    lookupcache: Literal["all", "positive", "none"] | None = None
    nconnect: int = Field(default=1, ge=1, le=16)  # TCP connections the client spreads over
    threads: int = Field(default=8, ge=1, le=64)  # nfsd threads

    @model_validator(mode="after")
    def _consistent(self) -> "NfsOptions":
        if self.proto == "udp" and self.vers != "3":
            raise ValueError(
                f'proto "udp": NFS {self.vers} runs over TCP only; use vers = "3" or proto = "tcp"'
            )
        for name in ("rsize", "wsize"):
            value = getattr(self, name)
            if value is not None and not 4096 <= parse_size(value) <= 2**20:
                raise ValueError(f"{name} {value}: the kernel takes 4K to 1M")
        return self

    def mount_options(self) -> list[str]:
        chosen = [f"vers={self.vers}", f"proto={self.proto}"]
        chosen += ["nolock"] if self.vers == "3" else []
        chosen += [f"{name}={parse_size(v)}" for name in ("rsize", "wsize") if (v := getattr(self, name))]
        chosen += [f"actimeo={self.actimeo}"] if self.actimeo is not None else []
        chosen += [f"lookupcache={self.lookupcache}"] if self.lookupcache else []
        chosen += [f"nconnect={self.nconnect}"] if self.nconnect > 1 else []
        return [*chosen, *(["ro"] if self.readonly else [])]

    def export_options(self) -> str:
        access = "ro" if self.readonly else "rw"
        stable = "sync" if self.sync else "async"
        # fsid: the export may sit on a file system without a UUID (tmpfs, overlay); 0 makes it
        # NFSv4's root, which the client mounts as "/" (the guest's own root, 9p, cannot be
        # walked through by nfsd's pseudo file system)
        return f"{access},{stable},no_subtree_check,no_root_squash,insecure,fsid={0 if self.v4 else 1}"

    @property
    def v4(self) -> bool:
        return self.vers != "3"


def client_rpc(server_pid: int) -> tuple[int, int]:
    """(calls, retransmissions) of the NFS client in the server's network namespace."""
    for line in Path(f"/proc/{server_pid}/net/rpc/nfs").read_text().splitlines():
        if line.startswith("rpc "):
            fields = line.split()
            return int(fields[1]), int(fields[2])
    return 0, 0


@register
class NfsLayer(Layer[NfsOptions]):
    kind = "nfs"
    Options = NfsOptions
    summary = "the layer below exported by the kernel's NFS server, mounted back over loopback"
    tools = (
        "rpcbind",
        "rpc.mountd",
        "rpc.nfsd",
        "nfsdcld",
        "exportfs",
        "mount.nfs",
        "unshare",
        "nsenter",
        "ip",
    )
    kernel_modules = ("nfsd", "nfsv3", "nfsv4")

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        export = below.path / f"layer{self.index}-nfs-export"
        export.mkdir()
        state = ctx.subdir(f"L{self.index}-nfsd")
        target = ctx.subdir(f"L{self.index}-nfs")
        with contextlib.ExitStack() as held:
            server = held.enter_context(self._server(ctx, state, export))
            held.callback(_stop_serving, server.pid)  # before the daemons: the threads, the export
            netns = Path(f"/proc/{server.pid}/ns/net")
            source = f"127.0.0.1:{'/' if options.v4 else export}"
            via = ["nsenter", f"--net={netns}", "--"]
            held.enter_context(
                ctx.scratch.mounted(source, target, fstype="nfs", options=options.mount_options(), via=via)
            )
            _past_grace(target)
            counted: dict[str, tuple[int, int]] = {}

            def before() -> dict[str, object]:
                counted["before"] = client_rpc(server.pid)
                return {}

            def after() -> dict[str, object]:
                calls, resent = client_rpc(server.pid)
                first_calls, first_resent = counted.get("before", (calls, resent))
                return {RPC_CALLS.key: calls - first_calls, RETRANSMISSIONS.key: resent - first_resent}

            served = (
                f"nfsd {options.threads} threads, export {options.export_options()} of {export} "
                f"[rpcbind, mountd, nfsdcld: pid {server.pid}'s group, own network namespace]"
            )
            if options.v4:
                skipped = _read(state / "grace") == "Y"
                served += ", NFSv4 grace period " + (
                    "skipped: no clients to reclaim" if skipped else "waited out"
                )
            yield Exposed(
                path=target,
                mount_lines=[mount_of(target).line(), served],
                before_run=[before],
                run_facts=[after],
                automount_entry=f"-fstype=nfs,{','.join(options.mount_options())} {source}",
                netns=netns,
            )

    @contextlib.contextmanager
    def _server(self, ctx: BuildContext, state: Path, export: Path) -> Iterator["subprocess.Popen[bytes]"]:
        script = _SERVER.format(
            lease=_LEASE_S,
            options=shlex.quote(self.options.export_options()),
            export=shlex.quote(str(export)),
            threads=self.options.threads,
        )
        argv = ["unshare", "--mount", "--net", "--propagation", "private", "--"]
        argv += ["sh", "-c", script, "layerbench-nfs", str(state)]
        log = state / "server.log"

        def start() -> "subprocess.Popen[bytes]":
            with open(log, "wb") as handle:
                return subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=handle, stderr=handle, start_new_session=True
                )

        with ctx.scratch.process(start, f"nfs server {state}", named=state) as server:
            try:
                _wait_ready(state / "ready", server, log)
                yield server
            finally:
                resources.stop_process_group(server.pid, None)  # rpcbind and mountd with it


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _wait_ready(ready: Path, server: "subprocess.Popen[bytes]", log: Path) -> None:
    deadline = time.monotonic() + _READY_WAIT_S
    while not ready.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            said = log.read_text(errors="replace").strip().splitlines()
            why = said[-1] if said else f"exit status {server.poll()}"
            raise SetupError(f"nfs: the server did not start: {why}")
        time.sleep(0.05)


def _stop_serving(server_pid: int) -> None:
    """nfsd's threads stop and the export goes, in the server's namespaces (best effort: the
    network namespace takes the rest with it when its last process and mount are gone)."""
    enter = ["nsenter", "-t", str(server_pid), "-m", "-n", "--"]
    for command in (["rpc.nfsd", "0"], ["exportfs", "-ua"]):
        with contextlib.suppress(SetupError):
            system.run([*enter, *command], timeout=60)


def _past_grace(top: Path) -> None:
    """A new NFSv4 server refuses opens in its grace period, unless it skipped it: the client
    waits it out here, with one file made and removed, so that the timed run never does."""
    probe = top / ".layerbench-nfs-probe"
    probe.write_bytes(b"")
    probe.unlink()
