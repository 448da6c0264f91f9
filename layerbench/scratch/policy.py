"""Which directory may be a scratch root: never '/', a system directory, a mount point
we did not make, or a non-empty directory without our marker."""

import os
from pathlib import Path

from layerbench.core.errors import UserError
from layerbench.linux import mounts

MARKER = ".layerbench-scratch"
DEFAULT_ROOT = Path("/var/tmp/layerbench")
_FORBIDDEN = ("/proc", "/sys", "/dev", "/run", "/boot", "/etc", "/usr", "/bin", "/sbin", "/lib")


def check_root(root: Path) -> Path:
    """Refuse a scratch root that could hold something that is not ours."""
    resolved = Path(os.path.realpath(root))
    text = str(resolved)
    if text == "/":
        raise UserError(f"scratch root {root}: refusing '/'; choose a directory such as {DEFAULT_ROOT}")
    for forbidden in _FORBIDDEN:
        if text == forbidden or text.startswith(forbidden + "/"):
            raise UserError(f"scratch root {root}: refusing a path under {forbidden}")
    if resolved.exists() and not resolved.is_dir():
        raise UserError(f"scratch root {root}: exists and is not a directory")
    if resolved.exists() and mounts.is_mount_point(resolved):
        raise UserError(
            f"scratch root {root}: is a mount point layerbench did not create; "
            "choose a fresh directory under it"
        )
    if resolved.exists() and any(resolved.iterdir()) and not (resolved / MARKER).exists():
        raise UserError(
            f"scratch root {root}: exists, is not empty and was not made by layerbench; "
            "choose an empty or new directory"
        )
    return resolved


def inside(path: str | os.PathLike[str], root: Path) -> bool:
    """path lies strictly under root (root itself is not inside)."""
    return str(path).startswith(str(root).rstrip("/") + "/")
