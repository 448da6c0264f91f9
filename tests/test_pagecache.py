"""The per-file dirty page count (cachestat) of a tree: what a durability verdict on a shared
disk reads."""

import os
import subprocess
from pathlib import Path

import pytest

from layerbench.linux import pagecache


def _write(path: Path, size: int, *, sync: bool) -> None:
    with path.open("wb") as out:
        out.write(os.urandom(size))
        out.flush()
        if sync:
            os.fsync(out.fileno())


def test_dirty_data_counts_until_it_is_synced(tmp_path: Path) -> None:
    (tmp_path / "deep" / "er").mkdir(parents=True)
    _write(tmp_path / "deep" / "er" / "unsynced", 8 * 2**20, sync=False)
    _write(tmp_path / "synced", 4 * 2**20, sync=True)
    dirty = pagecache.dirty_bytes_under(tmp_path)
    assert dirty is not None, "cachestat(2) is missing: Linux 6.5 or later has it"
    # The unsynced 8 MiB, less what the flusher may already have taken (it starts on data
    # 30 s old, or past the background threshold: neither here); the synced file adds none.
    assert 8 * 2**20 <= dirty < 12 * 2**20, dirty
    _write(tmp_path / "at-the-root", 4 * 2**20, sync=False)
    assert 12 * 2**20 <= (pagecache.dirty_bytes_under(tmp_path) or 0) < 16 * 2**20
    assert 8 * 2**20 <= (pagecache.dirty_bytes_under(tmp_path, root_files=False) or 0) < 12 * 2**20
    os.sync()
    assert pagecache.dirty_bytes_under(tmp_path) == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="a bind mount needs root")
def test_a_mount_point_below_is_not_entered(tmp_path: Path) -> None:
    """A bind layer's top under the trial's directory shows the files beside it again (same
    file system, same device number): they count once, where they live."""
    lower, top = tmp_path / "lower", tmp_path / "top"
    lower.mkdir()
    top.mkdir()
    _write(lower / "unsynced", 8 * 2**20, sync=False)
    subprocess.run(["mount", "--bind", str(lower), str(top)], check=True)
    try:
        assert 8 * 2**20 <= (pagecache.dirty_bytes_under(top) or 0) < 12 * 2**20  # the top itself: entered
        assert 8 * 2**20 <= (pagecache.dirty_bytes_under(tmp_path) or 0) < 12 * 2**20  # not twice
    finally:
        subprocess.run(["umount", str(top)], check=True)
        os.sync()
