"""A private mount namespace for a run: its mounts never show in the host's table, and
the kernel drops them (and their autoclear loop devices) if the run is killed."""

import ctypes
import os

from layerbench import system

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
