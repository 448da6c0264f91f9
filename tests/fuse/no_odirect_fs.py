#!/usr/bin/env python3
"""A FUSE passthrough that refuses O_DIRECT opens with EINVAL, as many FUSE file systems
do: the layer the fio workload's direct_refused modes are tested on (this kernel's tmpfs
and bindfs accept O_DIRECT).

    no_odirect_fs.py SOURCE MOUNTPOINT     (in the foreground, until unmounted)
"""

import errno
import os
import sys

from fuse import FUSE, FuseOSError, Operations


class NoDirect(Operations):
    def __init__(self, root: str) -> None:
        self.root = root

    def _path(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def getattr(self, path, fh=None):
        st = os.lstat(self._path(path))
        keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size", "st_uid")
        return {key: getattr(st, key) for key in keys}

    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self._path(path))]

    def statfs(self, path):
        sv = os.statvfs(self._path(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag",
                "f_frsize", "f_namemax")  # fmt: skip
        return {key: getattr(sv, key) for key in keys}

    def _refuse_direct(self, flags: int) -> None:
        if flags & os.O_DIRECT:
            raise FuseOSError(errno.EINVAL)

    # raw_fi: the open flags arrive in fi.flags, and the handle goes back in fi.fh.
    def open(self, path, fi):
        self._refuse_direct(fi.flags)
        fi.fh = os.open(self._path(path), fi.flags)
        return 0

    def create(self, path, mode, fi):
        self._refuse_direct(fi.flags)
        fi.fh = os.open(self._path(path), fi.flags | os.O_CREAT, mode)
        return 0

    def read(self, path, size, offset, fi):
        return os.pread(fi.fh, size, offset)

    def write(self, path, data, offset, fi):
        return os.pwrite(fi.fh, data, offset)

    def truncate(self, path, length, fi=None):
        os.truncate(self._path(path), length)

    def flush(self, path, fi):
        return 0

    def fsync(self, path, datasync, fi):
        os.fsync(fi.fh)
        return 0

    def release(self, path, fi):
        os.close(fi.fh)
        return 0

    def unlink(self, path):
        os.unlink(self._path(path))

    def mkdir(self, path, mode):
        os.mkdir(self._path(path), mode)

    def rmdir(self, path):
        os.rmdir(self._path(path))

    def rename(self, old, new):
        os.rename(self._path(old), self._path(new))

    def chmod(self, path, mode):
        os.chmod(self._path(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self._path(path), uid, gid)

    def utimens(self, path, times=None):
        os.utime(self._path(path), times)


if __name__ == "__main__":
    FUSE(NoDirect(sys.argv[1]), sys.argv[2], foreground=True, nothreads=True, allow_other=True, raw_fi=True)
