"""The jail: a chroot over a stack that carries a world, laid out like the FreeBSD report's
/var/tmp/jail. `ro/` is the stack's top (the world as the layers expose it), mounted
read-only; `bin`, `lib`, `etc`, `usr/bin`, `usr/include` ... are symlinks into `ro/`;
`tmp/` and `usr/src/` (the work dir) are writable directories on the scratch root's own
file system; `dev/` and `proc/` are mounted.

Every file the compiler opens from the world therefore passes through the layer under
test, while the build's own output does not.
"""

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from layerbench.content.worlds import JAIL_OWN
from layerbench.linux.mounts import mount_of
from layerbench.scratch import Scratch

WORK_DIR = "usr/src"  # where sources go, inside the jail (as /usr/ports was)
_USR_OWN = frozenset({"src", "local"})


@dataclass
class Jail:
    root: Path
    mount_lines: list[str] = field(default_factory=list)

    @property
    def work(self) -> Path:
        return self.root / WORK_DIR

    def inside(self, path: Path) -> str:
        """path as the chrooted processes see it."""
        return "/" + str(path.relative_to(self.root))

    def command(self, script: str) -> list[str]:
        """argv running a shell script inside the jail, with a clean environment."""
        return [
            "chroot",
            str(self.root),
            "/usr/bin/env",
            "-i",
            "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME=/tmp",
            "TMPDIR=/tmp",
            "LC_ALL=C",
            "/bin/sh",
            "-c",
            script,
        ]


def _layout(root: Path, world: Path) -> None:
    (root / "ro").mkdir()
    for name in sorted(os.listdir(world)):
        if name not in JAIL_OWN and not name.startswith("."):
            (root / name).symlink_to(f"ro/{name}")
    usr = root / "usr"
    usr.mkdir()
    if (world / "usr").is_dir():
        for name in sorted(os.listdir(world / "usr")):
            if name not in _USR_OWN:
                (usr / name).symlink_to(f"../ro/usr/{name}")
    for own in ("usr/src", "usr/local", "tmp", "dev", "proc", "root"):
        (root / own).mkdir()
    os.chmod(root / "tmp", 0o1777)


@contextlib.contextmanager
def built(scratch: Scratch, root: Path, world: Path, top: Path) -> Iterator[Jail]:
    """Lay out the jail at root (a fresh directory) over the stack's top; mount ro/, dev/
    and proc/; unmount on the way out."""
    _layout(root, world)
    jail = Jail(root=root)
    with contextlib.ExitStack() as mounts:
        mounts.enter_context(scratch.mounted(str(top), root / "ro", bind=True, readonly_bind=True))
        mounts.enter_context(scratch.mounted("/dev", root / "dev", bind=True, readonly_bind=True))
        mounts.enter_context(scratch.mounted("proc", root / "proc", fstype="proc"))
        jail.mount_lines = [mount_of(root / name).line() for name in ("ro", "dev", "proc")]
        yield jail
