"""Device-mapper mappings made for a scratch root: named after the root, so that `clean`
finds those a killed run left and never touches anyone else's. LVM names a volume's mapping
VG-LV with each dash inside a name doubled, so a volume group named after the root maps to
the same prefix with its dashes doubled."""

import hashlib
import shutil
import subprocess
from pathlib import Path

from layerbench.core.errors import SetupError

_PREFIX = "layerbench-"
_PASSES = 8  # a mapping is removed once nothing above it holds it: top down, one pass a level


def prefix_of(scratch_root: Path) -> str:
    """What every mapping of this scratch root is named with first."""
    return f"{_PREFIX}{hashlib.sha256(str(scratch_root).encode()).hexdigest()[:12]}-"


def mapping_name(scratch_root: Path, label: str) -> str:
    return f"{prefix_of(scratch_root)}{label}"


def lvm_mapping_prefix(volume_group: str) -> str:
    """The prefix of the mappings of an LVM volume group's volumes."""
    return volume_group.replace("-", "--") + "-"


def present() -> bool:
    """This kernel has device-mapper and dmsetup is installed (not /dev/mapper/control,
    which dmsetup makes even where the kernel has no driver behind it)."""
    return Path("/sys/class/misc/device-mapper").exists() and shutil.which("dmsetup") is not None


def names() -> list[str]:
    if not present():
        return []
    listed = subprocess.run(["dmsetup", "ls"], capture_output=True, text=True, check=False, timeout=60)
    lines = listed.stdout.splitlines()
    return [line.split()[0] for line in lines if line.strip() and "No devices" not in line]


def prefixes_of(scratch_root: Path) -> tuple[str, str]:
    """What the mappings this scratch root made start with: its own, and its volume groups'."""
    prefix = prefix_of(scratch_root)
    return prefix, lvm_mapping_prefix(prefix)


def remove_all(prefix: str) -> list[str]:
    """Remove every mapping whose name starts with prefix, those stacked on others first;
    the names removed. Raise SetupError naming what could not be removed."""
    removed: list[str] = []
    last = ""
    for _ in range(_PASSES):
        left = [name for name in names() if name.startswith(prefix)]
        if not left:
            return removed
        for name in left:
            removing = ["dmsetup", "remove", "--retry", name]
            done = subprocess.run(removing, capture_output=True, text=True, check=False, timeout=120)
            if done.returncode == 0:
                removed.append(name)
            else:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    if left := [name for name in names() if name.startswith(prefix)]:
        raise SetupError(f"cannot remove the device-mapper mapping(s) {', '.join(left)}: {last}")
    return removed
