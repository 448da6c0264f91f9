#!/usr/bin/env python3
"""Make the git repository `examples/bisect-fuse.toml` bisects: 16 commits of a small FUSE
passthrough (Python, fusepy), one of which makes every write wait a little.

    make_repo.py DEST                      commit 11 adds 0.2 ms per write (the default)
    make_repo.py DEST --slower 5 --faster 9 --slower 13
                                           up at 5, back down at 9, up again at 13

Each commit is tagged c00 .. c15; the daemon is passthrough.py, run in the foreground as
`passthrough.py SOURCE MOUNTPOINT`.
"""

import argparse
import os
import subprocess
from pathlib import Path

COMMITS = 16
DELAY_S = 0.0002

DAEMON = '''#!/usr/bin/env python3
"""A FUSE passthrough of SOURCE at MOUNTPOINT, in the foreground (revision {number})."""

import os
import sys
import time

from fuse import FUSE, Operations

WRITE_DELAY_S = {delay}


class Passthrough(Operations):
    def __init__(self, root):
        self.root = root

    def _path(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def getattr(self, path, fh=None):
        st = os.lstat(self._path(path))
        keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size", "st_uid")
        return {{key: getattr(st, key) for key in keys}}

    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self._path(path))]

    def statfs(self, path):
        sv = os.statvfs(self._path(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag",
                "f_frsize", "f_namemax")
        return {{key: getattr(sv, key) for key in keys}}

    def open(self, path, flags):
        return os.open(self._path(path), flags)

    def create(self, path, mode, fi=None):
        return os.open(self._path(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        if WRITE_DELAY_S:
            time.sleep(WRITE_DELAY_S)
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        os.truncate(self._path(path), length)

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        os.fsync(fh)
        return 0

    def release(self, path, fh):
        os.close(fh)
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
    FUSE(Passthrough(sys.argv[1]), sys.argv[2], foreground=True, nothreads=True, allow_other=True)
'''


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dest", type=Path)
    parser.add_argument("--slower", type=int, action="append", default=[], help="a commit adding the delay")
    parser.add_argument("--faster", type=int, action="append", default=[], help="a commit taking it away")
    parser.add_argument("--commits", type=int, default=COMMITS, help=f"how many (default {COMMITS})")
    args = parser.parse_args()
    slower = args.slower or ([] if args.faster else [11])
    if not 2 <= args.commits <= 100 or any(not 0 < n < args.commits for n in slower + args.faster):
        last = args.commits - 1
        parser.error(f"--commits is 2 to 100, and each --slower or --faster a commit from 1 to {last}")
    if args.dest.exists():
        parser.error(f"{args.dest} exists; give a new directory")
    args.dest.mkdir(parents=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "layerbench example",
        "GIT_AUTHOR_EMAIL": "example@layerbench.invalid",
        "GIT_COMMITTER_NAME": "layerbench example",
        "GIT_COMMITTER_EMAIL": "example@layerbench.invalid",
    }

    def git(*arguments: str) -> None:
        subprocess.run(["git", "-C", str(args.dest), *arguments], check=True, env=env, capture_output=True)

    git("init", "--quiet", "--initial-branch=main")
    delay = 0.0
    for number in range(args.commits):
        if number in slower:
            delay, subject = DELAY_S, f"c{number:02d}: wait {DELAY_S * 1000:g} ms before each write"
        elif number in args.faster:
            delay, subject = 0.0, f"c{number:02d}: no more waiting before writes"
        else:
            subject = f"c{number:02d}: notes, revision {number}"
        daemon = args.dest / "passthrough.py"
        daemon.write_text(DAEMON.format(number=number, delay=delay))
        daemon.chmod(0o755)
        (args.dest / "NOTES").write_text(f"revision {number}\n")
        git("add", "passthrough.py", "NOTES")
        git("commit", "--quiet", "-m", subject)
        git("tag", f"c{number:02d}")
    print(
        f"{args.dest}: {args.commits} commits, tagged c00 .. c{args.commits - 1:02d}; "
        f"slower at {slower}, faster at {args.faster}"
    )


if __name__ == "__main__":
    main()
