"""md arrays made of loop devices: found by their members, so that `clean` stops those a
killed run left (their members' images lie in its scratch root) and no one else's."""

import subprocess
from pathlib import Path

from layerbench.core.errors import SetupError


def members(array: str) -> list[str]:
    """The block devices an md array (md127) is made of."""
    return sorted(path.name for path in Path("/sys/block", array, "slaves").glob("*"))


def arrays() -> list[str]:
    return sorted(path.name for path in Path("/sys/block").glob("md*"))


def array_of(device: str) -> str | None:
    """The md array a block device (loop3) is a member of."""
    holders = sorted(path.name for path in Path("/sys/block", device, "holders").glob("md*"))
    return holders[0] if holders else None


def stop(array: str) -> bool:
    """Stop an array if it is still there; True if it was."""
    if not Path("/sys/block", array).exists():
        return False
    done = subprocess.run(
        ["mdadm", "--stop", f"/dev/{array}"], capture_output=True, text=True, check=False, timeout=120
    )
    if done.returncode != 0 and Path("/sys/block", array, "md").exists():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SetupError(f"cannot stop the md array /dev/{array}: {last}")
    return True
