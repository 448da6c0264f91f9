"""Churn through the automounter, for the churn child: a trial's own automount daemon
(autofs) with its own master map and an indirect map of N entries, each mounting the
stack's top again (a bind of it, or what its layer gives: an NFS export). A round touches
every entry, which the kernel hands to the daemon to mount, then asks the daemon to expire
them all at once (SIGUSR1: "unmount what is not in use"), and waits until they are gone.

The child runs in a mount namespace of its own (the churn workload starts it under
`unshare --mount`): the autofs mount, the daemon's fifos under a tmpfs /run and every
mount it makes go with that namespace, whatever ends the child."""

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from layerbench.core.errors import SetupError
from layerbench.linux import mounts, procfs

_START_WAIT_S = 60.0  # the daemon reads its maps and mounts autofs (slow under tcg)
_EXPIRE_WAIT_S = 60.0
_TROUBLE = re.compile(r"error|fail|refused|not found|no such|denied|warn", re.IGNORECASE)


def keys(entries: int) -> list[str]:
    """The indirect map's keys."""
    return [f"e{number}" for number in range(entries)]


def map_text(entries: int, entry: str | None, top: Path) -> str:
    """The indirect map: N keys, each mounting the top again (entry: "-options location")."""
    location = entry or f"-fstype=bind :{top}"
    return "".join(f"{key} {location}\n" for key in keys(entries))


def autofs_mounts(autodir: Path) -> list[str]:
    """The entries mounted under the autofs mount point now."""
    return [e.mount_point for e in mounts.mounts_under(autodir) if Path(e.mount_point) != autodir]


@contextlib.contextmanager
def automounter(workdir: Path, entries: int, entry: str | None, top: Path) -> Iterator[tuple[Path, int]]:
    """The daemon, serving workdir/auto; yields (that directory, its pid). Stopped on the
    way out (SIGTERM: it unmounts its mounts and its autofs mount, then exits)."""
    if not procfs.kernel_has_filesystem("autofs"):
        raise SetupError(
            "churn through the automounter: this kernel has no autofs (a stack above a vm layer "
            "churns in its guest, whose kernel loads autofs4)"
        )
    autodir = workdir / "auto"
    autodir.mkdir()
    (workdir / "auto.map").write_text(map_text(entries, entry, top))
    (workdir / "auto.master").write_text(f"{autodir} file:{workdir / 'auto.map'} --timeout=3600\n")
    # Its fifos and pid file go to /run: a tmpfs there, in this namespace only.
    mounts.mount("layerbench-automount", "/run", fstype="tmpfs", options=["size=4M", "mode=755"])
    log = open(workdir / "automount.log", "wb")  # noqa: SIM115 - open for the daemon's life
    # A process group of its own: the kernel serves lookups from the daemon's group raw (that
    # is how it mounts), so the child's own lookups would never trigger a mount.
    daemon = subprocess.Popen(
        ["automount", "-f", "-v", "-t", "3600", str(workdir / "auto.master")],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        _wait(lambda: mounts.is_mount_point(autodir), daemon, _START_WAIT_S, "did not mount its autofs")
        yield autodir, daemon.pid
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()


def _wait(done: Callable[[], bool], daemon: "subprocess.Popen[bytes]", limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not done():
        if daemon.poll() is not None:
            raise SetupError(f"automount exited (status {daemon.returncode}) and {what}")
        if time.monotonic() > deadline:
            raise SetupError(f"automount {what} within {limit:.0f} s")
        time.sleep(0.01)


def round_of(
    autodir: Path, names: list[str], pid: int, use: Callable[[Path], None]
) -> tuple[list[float], list[str], float]:
    """Mount every entry by touching it and use it, then expire them all: each mount's
    seconds, what failed (the key named), and the seconds the expiry took. Raises OSError
    when the entries outlive the expiry."""
    mounted: list[float] = []
    failed: list[str] = []
    for name in names:
        began = time.monotonic()
        path = autodir / name
        try:
            os.listdir(path)  # the lookup blocks until the daemon has mounted it
            mounted.append(time.monotonic() - began)
            use(path)
        except OSError as exc:
            failed.append(f"{name}: {exc.strerror or exc}")
    began = time.monotonic()
    os.kill(pid, signal.SIGUSR1)
    deadline = began + _EXPIRE_WAIT_S
    while left := autofs_mounts(autodir):
        if time.monotonic() > deadline:
            raise OSError(f"{len(left)} entries still mounted {_EXPIRE_WAIT_S:.0f} s after the expiry")
        time.sleep(0.002)
    return mounted, failed, time.monotonic() - began


def daemon_errors(workdir: Path) -> list[str]:
    """The lines of the daemon's log that report a failure."""
    log = workdir / "automount.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return [line.strip() for line in text.splitlines() if _TROUBLE.search(line)]
