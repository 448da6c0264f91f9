"""How much of a tree's file data is still dirty (or being written back) in the page cache,
per file, through the cachestat(2) system call (Linux 6.5).

Per file, not per device: another program writing to the same disk at the same time changes
nothing here, which is what a durability verdict on a shared disk needs (the bytes a device
wrote during a run count every writer's)."""

import ctypes
import errno
import os
from pathlib import Path

from layerbench.linux import mounts
from layerbench.linux.procfs import PAGE

_CACHESTAT = 451  # the system call's number on x86_64 and arm64 (the generic table)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]  # len 0: to the end


class _Stat(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")
    ]


_libc = ctypes.CDLL(None, use_errno=True)


class Unavailable(Exception):
    """The kernel has no cachestat (older than 6.5, or built without it)."""


def _not_durable_pages(fd: int) -> int:
    whole, found = _Range(0, 0), _Stat()
    if _libc.syscall(_CACHESTAT, fd, ctypes.byref(whole), ctypes.byref(found), 0) != 0:
        if (code := ctypes.get_errno()) == errno.ENOSYS:
            raise Unavailable(os.strerror(code))
        return 0  # a file cachestat may not look at is not the run's (the run's are root's)
    return int(found.nr_dirty + found.nr_writeback)


def dirty_bytes_under(root: Path, *, root_files: bool = True) -> int | None:
    """Bytes of the regular files under root that are dirty or under writeback now; None
    where the kernel cannot tell. Mount points below root are not entered (a bind mount of a
    directory beside it would count its files twice, a layer's top is the stack's upper data).
    root_files=False leaves out the files right in root, counting only its subdirectories'."""
    top = os.path.realpath(root)
    device = os.stat(top).st_dev
    skipped = {entry.mount_point for entry in mounts.mounts_under(top)} - {top}
    pages, pending = 0, [top]
    try:
        while pending:
            directory = pending.pop()
            counted = root_files or directory != top
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.path not in skipped and entry.stat(follow_symlinks=False).st_dev == device:
                            pending.append(entry.path)
                    elif counted and entry.is_file(follow_symlinks=False):
                        pages += _file_pages(entry.path)
    except Unavailable:
        return None
    return pages * PAGE


def _file_pages(path: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOATIME)
    except OSError:
        return 0  # gone, or not ours to open: it holds none of the run's data
    try:
        return _not_durable_pages(fd)
    finally:
        os.close(fd)
