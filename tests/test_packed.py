"""squashfs, erofs and squashfuse layer options and their commands (no mounts)."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from layerbench.stacks.packed import ErofsLayer, ErofsOptions, SquashfsLayer, SquashfsOptions
from layerbench.stacks.squashfuse import SquashfuseLayer, SquashfuseOptions
from layerbench.workloads.read_tree import ReadTreeOptions


def test_squashfs_pack_command_carries_compressor_level_block_size_and_excludes_its_image() -> None:
    options = SquashfsOptions(kind="squashfs", compressor="zstd", level=3, block_size="1M")
    argv = SquashfsLayer(options, 1).pack_command(Path("/s/base"), Path("/s/base/layer1.sqfs"))
    assert argv[:3] == ["mksquashfs", "/s/base", "/s/base/layer1.sqfs"]
    assert argv[argv.index("-comp") + 1] == "zstd" and argv[argv.index("-Xcompression-level") + 1] == "3"
    assert argv[argv.index("-b") + 1] == str(2**20) and argv[argv.index("-e") + 1] == "layer1.sqfs"


def test_erofs_pack_command() -> None:
    argv = ErofsLayer(
        ErofsOptions(kind="erofs", compressor="lz4hc", level=9, cluster_size="64K"), 2
    ).pack_command(Path("/s/base"), Path("/s/base/layer2.erofs"))
    assert "-zlz4hc,9" in argv and f"-C{64 * 1024}" in argv and "--exclude-path=/s/base/layer2.erofs" in argv
    plain = ErofsLayer(ErofsOptions(kind="erofs", compressor="none"), 1).pack_command(
        Path("/a"), Path("/a/i")
    )
    assert not any(arg.startswith("-z") for arg in plain)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"kind": "squashfs", "compressor": "zip"}, "compressor"),
        ({"kind": "squashfs", "compressor": "zstd", "level": 23}, "level 23 for zstd: valid 1 to 22"),
        ({"kind": "squashfs", "compressor": "lz4", "level": 3}, "compressor lz4 takes no level"),
        ({"kind": "squashfs", "block_size": "3K"}, "a power of two from 4K to 1M"),
        ({"kind": "squashfs", "content": "builtin:huge-tree"}, "unknown built-in tree"),
        ({"kind": "erofs", "compressor": "lz4", "level": 1}, "compressor lz4 takes no level"),
        ({"kind": "erofs", "cluster_size": "6K"}, "a multiple of 4K"),
    ],
)
def test_bad_packed_options_say_what_is_valid(options: dict[str, object], said: str) -> None:
    model = SquashfsOptions if options["kind"] == "squashfs" else ErofsOptions
    with pytest.raises(ValidationError) as raised:
        model(**options)  # type: ignore[arg-type]
    assert said in str(raised.value)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"readers": 0}, "greater than or equal to 1"),
        ({"mode": "scan"}, "'stat' or 'read'"),
        ({"tree": "builtin:nope"}, "unknown built-in tree"),
        ({"tree": "/no/such.tar"}, "no such archive file"),
    ],
)
def test_bad_read_tree_options(options: dict[str, object], said: str) -> None:
    with pytest.raises(ValidationError) as raised:
        ReadTreeOptions(kind="read-tree", **options)  # type: ignore[arg-type]
    assert said in str(raised.value)


def test_squashfuse_serves_the_image_read_only_threaded_or_not() -> None:
    threaded = SquashfuseLayer(SquashfuseOptions(kind="squashfuse"), 1)
    assert threaded.daemon_argv(Path("/s/base/layer1.sqfs"), Path("/s/t")) == [
        "squashfuse_ll", "-f", "-o", "ro", "/s/base/layer1.sqfs", "/s/t",
    ]  # fmt: skip
    single = SquashfuseLayer(
        SquashfuseOptions(kind="squashfuse", multithreaded=False, options=["max_threads=4"]), 1
    )
    assert single.daemon_argv(Path("/i"), Path("/t")) == [
        "squashfuse_ll",
        "-f",
        "-s",
        "-o",
        "ro,max_threads=4",
        "/i",
        "/t",
    ]
    # The image is packed as squashfs packs it: the same options, the same command.
    options = SquashfuseOptions(kind="squashfuse", compressor="gzip", level=6)
    assert SquashfuseLayer.pack_command is SquashfsLayer.pack_command
    argv = SquashfuseLayer(options, 1).pack_command(Path("/b"), Path("/b/i"))
    assert argv[argv.index("-comp") : argv.index("-comp") + 4] == [
        "-comp",
        "gzip",
        "-Xcompression-level",
        "6",
    ]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"options": ["ro,allow_other"]}, "one usable option (one per list item)"),
        ({"compressor": "lz4", "level": 3}, "compressor lz4 takes no level"),
        ({"multithreaded": "yes"}, "valid boolean"),
    ],
)
def test_bad_squashfuse_options(options: dict[str, object], said: str) -> None:
    with pytest.raises(ValidationError) as raised:
        SquashfuseOptions(kind="squashfuse", **options)  # type: ignore[arg-type]
    assert said in str(raised.value)
