"""A private mount namespace for a run: its mounts never show in the host's table, and
the kernel drops them (and their autoclear loop devices) if the run is killed."""

import contextlib
import ctypes
import os
from collections.abc import Iterator

from layerbench.linux import system

_CLONE_NEWNS = 0x00020000
# True once this process runs in its own mount namespace: a mount made here is ours alone
# and vanishes with the process (tracing mounts tracefs only then).
PRIVATE = False


def enter_private_mount_namespace() -> str | None:
    """Move this (still single-threaded) process into a new mount namespace.

    Returns None on success, or the reason it could not be done; the run then goes on
    in the host's namespace and relies on its own teardown and the journal.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        return f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}"
    # Without this, mounts we make would propagate back to the host's shared mounts.
    system.run(["mount", "--make-rprivate", "/"])
    global PRIVATE
    PRIVATE = True
    return None


@contextlib.contextmanager
def private_mount_namespace() -> Iterator[str | None]:
    """In a new mount namespace while the body runs (yields None), or in the host's (yields
    the reason); on the way out, back in the namespace it came from, so that a process that
    goes on (a test, a library caller) is not left seeing a private copy of the host's mounts.
    The private namespace, and anything still mounted in it, goes once no process is in it."""
    home = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        # Entering a namespace moves the working directory to its root: this brings it back.
        cwd: int | None = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        cwd = None
    try:
        reason = enter_private_mount_namespace()
        try:
            yield reason
        finally:
            if reason is None:
                _return_to(home, cwd)
    finally:
        for descriptor in (home, cwd):
            if descriptor is not None:
                os.close(descriptor)


def _return_to(home: int, cwd: int | None) -> None:
    global PRIVATE
    libc = ctypes.CDLL(None, use_errno=True)
    # setns refuses a process that has started threads since (EINVAL): it then stays in the
    # private namespace, which the kernel drops when the process exits, as before.
    if libc.setns(home, _CLONE_NEWNS) != 0:
        return
    PRIVATE = False
    if cwd is not None:
        os.fchdir(cwd)
