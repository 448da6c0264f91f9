"""The per-file dirty page count (cachestat) of a tree: what a durability verdict on a shared
disk reads."""

import os
import subprocess
from pathlib import Path

import pytest

from layerbench.linux import pagecache
from layerbench.linux.procfs import PAGE

MiB = 2**20


def _write(path: Path, size: int, *, sync: bool) -> None:
    with path.open("wb") as out:
        out.write(os.urandom(size))
        out.flush()
        if sync:
            os.fsync(out.fileno())


def test_the_kernels_count_is_read_and_a_sync_empties_it(tmp_path: Path) -> None:
    """Real cachestat. Only what holds beside any neighbour: another program's sync(2) may
    write the unsynced data back at any moment, so it is between none and all of it."""
    _write(tmp_path / "unsynced", 8 * MiB, sync=False)
    _write(tmp_path / "synced", 4 * MiB, sync=True)
    dirty = pagecache.dirty_bytes_under(tmp_path)
    assert dirty is not None, "cachestat(2) is missing: Linux 6.5 or later has it"
    assert 0 <= dirty <= 8 * MiB, dirty  # the fsync'd file adds none
    os.sync()
    assert pagecache.dirty_bytes_under(tmp_path) == 0


@pytest.fixture
def sizes_as_dirty(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each file counts as wholly dirty: which files the walk takes, whatever a neighbour's
    sync(2) does to their pages meanwhile (the kernel's count is the test above)."""
    monkeypatch.setattr(pagecache, "_not_durable_pages", lambda fd: -(-os.fstat(fd).st_size // PAGE))


def test_every_file_below_counts_and_root_files_can_be_left_out(tmp_path: Path, sizes_as_dirty: None) -> None:
    (tmp_path / "deep" / "er").mkdir(parents=True)
    _write(tmp_path / "deep" / "er" / "data", 8 * MiB, sync=False)
    _write(tmp_path / "at-the-root", 4 * MiB, sync=False)
    assert pagecache.dirty_bytes_under(tmp_path) == 12 * MiB
    assert pagecache.dirty_bytes_under(tmp_path, root_files=False) == 8 * MiB


@pytest.mark.skipif(os.geteuid() != 0, reason="a bind mount needs root")
def test_a_mount_point_below_is_not_entered(tmp_path: Path, sizes_as_dirty: None) -> None:
    """A bind layer's top under the trial's directory shows the files beside it again (same
    file system, same device number): they count once, where they live."""
    lower, top = tmp_path / "lower", tmp_path / "top"
    lower.mkdir()
    top.mkdir()
    _write(lower / "data", 8 * MiB, sync=False)
    subprocess.run(["mount", "--bind", str(lower), str(top)], check=True)
    try:
        assert pagecache.dirty_bytes_under(top) == 8 * MiB  # the top itself: entered
        assert pagecache.dirty_bytes_under(tmp_path) == 8 * MiB  # not twice
    finally:
        subprocess.run(["umount", str(top)], check=True)
