"""The state of the scratch root's file system in the host facts."""

import subprocess
from pathlib import Path

import pytest
from helpers import TEST_ROOT

from layerbench.observe import fsstate


def test_the_scratch_roots_file_system_is_described() -> None:
    TEST_ROOT.mkdir(parents=True, exist_ok=True)
    state = fsstate.describe(TEST_ROOT)
    assert state["type"] and state["size_bytes"] > 0 and 0 <= state["used_share"] <= 1
    assert "from" in state["free_space"]
    if state["type"] in ("ext4", "xfs") and "large_free_share" in state["free_space"]:
        free = state["free_space"]
        assert free["free_extents"] > 0 and 0 <= free["large_free_share"] <= 1
    assert fsstate.summary(state)


def test_online_discard_is_named(needs_root: None, scratch_root: Path) -> None:
    """A tmpfs mounted here has no fragmentation figures (said so); an ext4 image mounted with
    discard is named as deferring work."""
    scratch_root.mkdir(parents=True)
    image = scratch_root / "fs.img"
    target = scratch_root / "mnt"
    target.mkdir()
    subprocess.run(["truncate", "-s", "64M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop,discard", str(image), str(target)], check=True)
    try:
        state = fsstate.describe(target)
        assert state["type"] == "ext4" and state["deferred_work"] == ["discard"]
        assert "online discard" in fsstate.summary(state)
        assert state["free_space"].get("free_extents", 1) > 0
    finally:
        subprocess.run(["umount", "-d", str(target)], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8M", "tmpfs", str(target)], check=True)
    try:
        state = fsstate.describe(target)
        assert state["free_space"] == {"from": "not measured for tmpfs here"} and state["deferred_work"] == []
    finally:
        subprocess.run(["umount", str(target)], check=True)


@pytest.mark.parametrize("options", ["rw,relatime", "rw,nodiscard"])
def test_options_without_deferred_work(options: str) -> None:
    assert [n for n in options.split(",") if n in fsstate.DEFERRED_WORK] == []


def test_ext4_without_a_journal_is_named(needs_root: None, scratch_root: Path) -> None:
    scratch_root.mkdir(parents=True)
    image, target = scratch_root / "fs.img", scratch_root / "mnt"
    target.mkdir()
    subprocess.run(["truncate", "-s", "64M", str(image)], check=True)
    for features, journal in (("^has_journal", False), ("has_journal", True)):
        subprocess.run(["mkfs.ext4", "-q", "-F", "-O", features, str(image)], check=True)
        subprocess.run(["mount", "-o", "loop", str(image), str(target)], check=True)
        try:
            state = fsstate.describe(target)
            assert state["journal"] is journal
            assert ("no journal" in fsstate.summary(state)) is not journal
        finally:
            subprocess.run(["umount", "-d", str(target)], check=True)


def _discards_completed(device: str) -> int:
    for line in Path("/proc/diskstats").read_text().splitlines():
        fields = line.split()
        if fields[2] == device:
            return int(fields[14])
    raise AssertionError(f"{device} is not in /proc/diskstats")


def test_without_a_journal_each_deletion_waits_for_its_discard(needs_root: None, scratch_root: Path) -> None:
    """What the summary says of ext4 with online discard and no journal, checked on the
    kernel: the discard of a deleted file's blocks has completed when its unlink returns."""
    scratch_root.mkdir(parents=True)
    image, target = scratch_root / "fs.img", scratch_root / "mnt"
    target.mkdir()
    subprocess.run(["truncate", "-s", "64M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop,discard", str(image), str(target)], check=True)
    try:
        state = fsstate.describe(target)
        assert fsstate.DISCARD_IN_THE_CALL in fsstate.summary(state)
        assert fsstate.DEFERRED_WORK["discard"] not in fsstate.summary(state)
        device = Path(state["source"]).name
        (target / "data").write_bytes(bytes(1 << 20))
        subprocess.run(["sync", "-f", str(target)], check=True)
        before = _discards_completed(device)
        (target / "data").unlink()
        assert _discards_completed(device) > before
    finally:
        subprocess.run(["umount", "-d", str(target)], check=True)
