"""stream-write's fill: written with O_DIRECT by default, through the page cache on request,
allocated where the top can preallocate, and written where it cannot."""

import os
from pathlib import Path

from layerbench.workloads.stream_write import StreamWrite, StreamWriteOptions


def _workload(**options: object) -> StreamWrite:
    return StreamWrite(StreamWriteOptions(kind="stream-write", **options), "write")  # type: ignore[arg-type]


def test_an_allocated_fill_takes_the_space_without_writing_it(tmp_path: Path) -> None:
    fill = tmp_path / "fill.dat"
    assert _workload(fill_with="allocate")._fill(fill, 8 << 20) == "allocate"
    assert fill.stat().st_size == 8 << 20 and fill.stat().st_blocks * 512 >= 8 << 20


def test_a_written_fill_holds_zeros(tmp_path: Path) -> None:
    fill = tmp_path / "fill.dat"
    assert _workload(fill_with="write")._fill(fill, 3 << 20) == "write"
    assert fill.read_bytes() == bytes(3 << 20)


def test_the_default_fill_is_written_with_o_direct(tmp_path: Path) -> None:
    fill = tmp_path / "fill.dat"
    assert _workload()._fill(fill, 4 << 20) == "direct"
    assert fill.stat().st_size == 4 << 20 and fill.stat().st_blocks * 512 >= 4 << 20
    assert fill.read_bytes() == bytes(4 << 20)


def test_a_top_that_cannot_preallocate_is_written(tmp_path: Path) -> None:
    """fallocate(2) refuses a FIFO (ESPIPE) as a FUSE daemon without it refuses a file
    (EOPNOTSUPP): the fill is then written, and says so."""
    fill = tmp_path / "fill.dat"
    os.mkfifo(fill)
    assert _workload(fill_with="allocate")._fill(fill, 1 << 20) == "write"
    assert fill.is_file() and fill.stat().st_size == 1 << 20
