"""Every layer kind, built for real in the host's mount namespace, then torn down."""

import shutil
from pathlib import Path
from typing import Any

import pytest

from layerbench.core.errors import SetupError, UserError
from layerbench.linux import mounts
from layerbench.plan import parse_plan
from layerbench.scratch import Scratch
from layerbench.stacks.base import BuildContext, build_stack, make_layers

CASES: dict[str, list[dict[str, Any]]] = {
    "dir": [],
    "dir-readonly": [{"kind": "dir", "readonly": True}],
    "bind": [{"kind": "bind"}],
    "bind-readonly": [{"kind": "bind", "readonly": True}],
    "tmpfs": [{"kind": "tmpfs", "size": "64M"}],
    "image-ext4": [{"kind": "image", "fs": "ext4", "size": "64M"}],
    "image-xfs": [{"kind": "image", "fs": "xfs", "size": "320M"}],
    "image-btrfs": [{"kind": "image", "fs": "btrfs", "size": "128M"}],
    "image-direct-io": [
        {
            "kind": "image",
            "size": "64M",
            "direct_io": True,
            "mount_options": ["noatime"],
            "mkfs_options": ["-b", "4096"],
        }
    ],
    "overlay-disk": [{"kind": "overlay"}],
    "overlay-tmpfs": [{"kind": "overlay", "upper": "tmpfs", "upper_size": "64M"}],
    "overlay-readonly": [{"kind": "overlay", "readonly": True}],
    "fuse": [{"kind": "fuse"}],
    "fuse-readonly": [{"kind": "fuse", "readonly": True}],
    "fuse-options": [
        {
            "kind": "fuse",
            "multithreaded": True,
            "kernel_cache": True,
            "attr_timeout": 2,
            "options": ["negative_timeout=1"],
            "arguments": ["--xattr-none"],
        }
    ],
    "nested": [
        {"kind": "tmpfs", "size": "128M"},
        {"kind": "image", "size": "64M"},
        {"kind": "bind"},
        {"kind": "overlay"},
    ],
}
READONLY = {"dir-readonly", "bind-readonly", "overlay-readonly", "fuse-readonly"}


def _layers(layers: list[dict[str, Any]]) -> list[Any]:
    body = ", ".join("{" + ", ".join(f"{k} = {_toml(v)}" for k, v in layer.items()) + "}" for layer in layers)
    plan = parse_plan(
        f'name = "t"\n[stacks.s]\nlayers = [{body}]\n[workloads.w]\nkind = "churn"\ncycles = 1\n', "test"
    )
    return make_layers(plan.stacks["s"])


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return f'"{value}"' if isinstance(value, str) else str(value)


@pytest.mark.parametrize("case", list(CASES))
def test_layer_builds_exposes_and_tears_down(needs_root: None, scratch_root: Path, case: str) -> None:
    layers = _layers(CASES[case])
    lacking = [m for layer in layers for m in layer.missing(layer.options)]
    if lacking:
        pytest.skip(f"this host lacks {lacking}")
    scratch = Scratch(scratch_root)
    with scratch.directory("trials", "t") as workdir:
        ctx = BuildContext(scratch=scratch, workdir=workdir)
        with build_stack(ctx, layers) as built:
            probe = built.top / "probe"
            if case in READONLY:
                with pytest.raises(OSError, match="Read-only"):
                    probe.write_text("x")
            else:
                probe.write_text("written through the stack")
                assert probe.read_text() == "written through the stack"
            made_mounts = [layer for layer in CASES[case] if layer["kind"] != "dir" or layer.get("readonly")]
            assert len(built.mount_lines) >= len(made_mounts)
            assert mounts.mounts_under(workdir) or not made_mounts
            if case.startswith("image"):
                assert built.devices()[0].startswith("loop")
                assert len(built.devices()) >= 2  # the loop device and the disk behind it
            if case == "tmpfs":
                assert built.devices() == [] and built.fs_size == 64 * 2**20
            if case.startswith("fuse"):
                (daemon,) = built.helper_pids
                cmdline = Path(f"/proc/{daemon}/cmdline").read_bytes().split(b"\0")
                assert cmdline[:2] == [b"bindfs", b"-f"] and "type fuse" in built.mount_lines[0]
                if case == "fuse-options":
                    assert b"--multithreaded" in cmdline and b"--xattr-none" in cmdline
                    assert b"kernel_cache,attr_timeout=2,negative_timeout=1" in cmdline
                    assert len(list(Path(f"/proc/{daemon}/task").iterdir())) >= 2
            if case == "image-direct-io":
                loop = built.devices()[0]
                assert Path(f"/sys/block/{loop}/loop/dio").read_text().strip() == "1"
        assert mounts.mounts_under(workdir) == []
        assert all(not Path(f"/proc/{pid}").exists() for pid in built.helper_pids)
    assert scratch.journal.pending() == []


def test_a_failing_layer_tears_down_the_layers_below(needs_root: None, scratch_root: Path) -> None:
    # An image larger than its tmpfs: mkfs fails after the tmpfs is mounted.
    layers = _layers(
        [{"kind": "tmpfs", "size": "16M"}, {"kind": "image", "size": "64M", "preallocate": True}]
    )
    scratch = Scratch(scratch_root)
    with scratch.directory("trials", "t") as workdir:
        ctx = BuildContext(scratch=scratch, workdir=workdir)
        with pytest.raises((SetupError, OSError)), build_stack(ctx, layers):
            pass
        assert mounts.mounts_under(workdir) == []


@pytest.mark.parametrize(
    ("options", "mkfs", "mount"),
    [
        ({"fs": "btrfs", "size": "128M", "compress": "zstd:3"}, ["-f", "-q"], ["compress=zstd:3"]),
        (
            {"fs": "btrfs", "size": "128M", "compress": "lzo", "mount_options": ["noatime"]},
            ["-f", "-q"],
            ["compress=lzo", "noatime"],
        ),
        (
            {"fs": "ext4", "data": "journal"},
            ["-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0"],
            ["data=journal"],
        ),
        (
            {"fs": "ext4", "journal": False},
            ["-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0", "-O", "^has_journal"],
            [],
        ),
    ],
)
def test_image_options_become_mkfs_and_mount_arguments(
    options: dict[str, object], mkfs: list[str], mount: list[str]
) -> None:
    from layerbench.stacks.image import ImageOptions

    checked = ImageOptions.model_validate({"kind": "image", **options})
    assert checked.mkfs_arguments() == mkfs and checked.fs_mount_options() == mount


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"fs": "btrfs", "size": "128M", "compress": "zstd:16"}, '"zstd" or "zstd:1"-"zstd:15"'),
        ({"fs": "btrfs", "size": "128M", "compress": "lzo:2"}, "a btrfs compression is"),
        ({"fs": "btrfs", "size": "128M", "compress": "brotli"}, "a btrfs compression is"),
        ({"fs": "ext4", "compress": "zstd"}, "compress: btrfs only (this image is ext4)"),
        ({"fs": "xfs", "size": "320M", "data": "writeback"}, "data: ext4 only (this image is xfs)"),
        ({"fs": "ext4", "data": "journal", "journal": False}, 'data: "journal" needs the journal'),
        ({"scheduler": "cfq"}, "'none', 'mq-deadline', 'kyber' or 'bfq'"),
        ({"sector_size": 3000}, "512, 1024, 2048 or 4096"),
        ({"device": "/dev/vdb", "scheduler": "bfq"}, "a device has none"),
    ],
)
def test_image_options_for_another_fs_or_out_of_range_are_refused(
    options: dict[str, object], said: str
) -> None:
    from pydantic import ValidationError

    from layerbench.stacks.image import ImageOptions

    with pytest.raises(ValidationError) as caught:
        ImageOptions.model_validate({"kind": "image", **options})
    assert said in str(caught.value)


def test_a_scheduler_the_kernel_lacks_is_named_with_what_a_loop_device_offers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Kernels differ: some are built without bfq (CONFIG_IOSCHED_BFQ unset), and writing it
    # to a queue then fails in every trial; the plan is refused before the first one instead.
    from layerbench.linux import procfs
    from layerbench.stacks.image import ImageLayer, ImageOptions

    monkeypatch.setattr(procfs, "loop_schedulers", lambda: ["none", "mq-deadline", "kyber"])
    monkeypatch.setattr(procfs, "_has_module", lambda name: False)
    lacking = ImageOptions.model_validate({"kind": "image", "scheduler": "bfq"})
    assert ImageLayer.missing(lacking)[-1] == (
        "the I/O scheduler 'bfq', which this kernel lacks (a loop device offers none, mq-deadline, kyber)"
    )
    offered = ImageOptions.model_validate({"kind": "image", "scheduler": "kyber"})
    assert not any("scheduler" in lack for lack in ImageLayer.missing(offered))
    monkeypatch.setattr(procfs, "_has_module", lambda name: name == "bfq")  # loaded on first use
    assert not any("scheduler" in lack for lack in ImageLayer.missing(lacking))


def test_a_fuse_daemon_by_its_command_line_serves_the_layer_below(
    needs_root: None, scratch_root: Path
) -> None:
    """fuse-daemon with bindfs as the daemon: the placeholders filled in, the daemon held,
    stopped at teardown; a missing program is a failed setup, a command with no mount point a
    plan error."""
    layers = _layers([{"kind": "fuse-daemon", "command": ["bindfs", "-f", "{source}", "{target}"]}])
    if lacking := layers[0].missing(layers[0].options) or ([] if shutil.which("bindfs") else ["bindfs"]):
        pytest.skip(f"this host lacks {lacking}")
    scratch = Scratch(scratch_root)
    with scratch.directory("trials", "t") as workdir:
        with build_stack(BuildContext(scratch=scratch, workdir=workdir), layers) as built:
            (built.top / "probe").write_text("through the daemon")
            (daemon,) = built.helper_pids
            cmdline = Path(f"/proc/{daemon}/cmdline").read_bytes().split(b"\0")
            assert cmdline[:2] == [b"bindfs", b"-f"] and cmdline[3] == str(built.top).encode()
            assert (Path(cmdline[2].decode()) / "probe").read_text() == "through the daemon"  # below
        assert not Path(f"/proc/{daemon}").exists()
    with scratch.directory("trials", "t2") as workdir:
        missing = _layers(
            [{"kind": "fuse-daemon", "command": ["/nonexistent/daemon", "{source}", "{target}"]}]
        )
        with (
            pytest.raises(SetupError, match="/nonexistent/daemon: no such executable"),
            build_stack(BuildContext(scratch=scratch, workdir=workdir), missing),
        ):
            pass
    with pytest.raises(UserError, match=r'names no mount point: one argument must hold "\{target\}"'):
        _layers([{"kind": "fuse-daemon", "command": ["bindfs", "-f", "{source}"]}])
    assert scratch.journal.pending() == []


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"cipher": "aes xts"}, "is not a cipher spec"),
        ({"size": "48M"}, "at least 64M"),
        ({"key_size": 384}, "128, 256 or 512"),
        ({"sector_size": 8192}, "512, 1024, 2048 or 4096"),
    ],
)
def test_dm_crypt_options_out_of_range_are_refused(options: dict[str, object], said: str) -> None:
    from pydantic import ValidationError

    from layerbench.stacks.dm_crypt import DmCryptOptions

    with pytest.raises(ValidationError) as caught:
        DmCryptOptions.model_validate({"kind": "dm-crypt", **options})
    assert said in str(caught.value)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"vers": "2"}, "'3', '4.0', '4.1' or '4.2'"),  # nfsd of 6.x serves NFSv2 no more
        ({"vers": "4.2", "proto": "udp"}, "NFS 4.2 runs over TCP only"),
        ({"wsize": "2M"}, "wsize 2M: the kernel takes 4K to 1M"),
        ({"nconnect": 17}, "less than or equal to 16"),
    ],
)
def test_nfs_options_out_of_range_are_refused(options: dict[str, object], said: str) -> None:
    from pydantic import ValidationError

    from layerbench.stacks.nfs import NfsOptions

    with pytest.raises(ValidationError) as caught:
        NfsOptions.model_validate({"kind": "nfs", **options})
    assert said in str(caught.value)


def test_nfs_mounts_v4_at_its_root_and_v3_by_path_without_locks() -> None:
    from layerbench.stacks.nfs import NfsOptions

    v4 = NfsOptions.model_validate({"kind": "nfs", "rsize": "64K", "actimeo": 0, "nconnect": 4})
    assert v4.mount_options() == ["vers=4.2", "proto=tcp", "rsize=65536", "actimeo=0", "nconnect=4"]
    assert v4.export_options().endswith("fsid=0") and ",sync," in v4.export_options()
    v3 = NfsOptions.model_validate({"kind": "nfs", "vers": "3", "sync": False, "readonly": True})
    assert v3.mount_options() == ["vers=3", "proto=tcp", "nolock", "ro"]
    assert v3.export_options().startswith("ro,async,") and v3.export_options().endswith("fsid=1")


def test_9p_options_of_a_vm_without_a_share_are_refused() -> None:
    from pydantic import ValidationError

    from layerbench.stacks.vm import VmOptions

    with pytest.raises(ValidationError) as caught:
        VmOptions.model_validate({"kind": "vm", "share_cache": "loose"})
    assert 'add share = "9p"' in str(caught.value)
    shared = VmOptions.model_validate({"kind": "vm", "share": "9p", "share_cache": "loose"})
    assert shared.share_options() == "msize=512000,cache=loose"


def test_a_layer_above_a_vm_is_checked_for_programs_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """dm-crypt needs device-mapper: on a host whose kernel lacks it, the layer is refused
    with where it can run; above a vm layer its kernel is the guest's, which loads it."""
    from layerbench.linux import procfs
    from layerbench.stacks.dm_crypt import DmCryptLayer, DmCryptOptions

    options = DmCryptOptions.model_validate({"kind": "dm-crypt"})
    monkeypatch.setattr(procfs, "kernel_has_module", lambda name: False)
    lacks = DmCryptLayer.missing(options)
    assert lacks and lacks[-1].startswith("the kernel module dm_crypt, which this host's kernel lacks")
    assert "above a vm layer" in lacks[-1]
    assert not [lack for lack in DmCryptLayer.missing(options, guest=True) if "kernel" in lack]
    monkeypatch.setattr(procfs, "kernel_has_module", lambda name: True)
    assert not [lack for lack in DmCryptLayer.missing(options) if "kernel" in lack]


def test_device_mapper_mappings_are_removed_after_mounts_and_before_loop_devices() -> None:
    from layerbench.linux import devmapper
    from layerbench.scratch import resources

    phases = {name: kind.phase for name, kind in resources.KINDS.items()}
    assert phases["mount"] < phases["dm"] < phases["loop"]
    # Named after the scratch root: another root's mappings never match its prefix.
    mine = devmapper.mapping_name(Path("/var/tmp/a"), "t1-L1")
    assert mine.startswith(devmapper.prefix_of(Path("/var/tmp/a")))
    assert not mine.startswith(devmapper.prefix_of(Path("/var/tmp/b")))
    assert len(devmapper.mapping_name(Path("/" + "x" * 300), "t" * 40)) < 128  # dm's limit
