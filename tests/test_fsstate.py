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
