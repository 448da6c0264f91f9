from pathlib import Path

from layerbench.linux import mounts


def test_mountinfo_parses_and_root_is_found() -> None:
    table = mounts.mount_table()
    assert any(e.mount_point == "/" for e in table)
    assert mounts.mount_of("/").mount_point == "/"


def test_mount_of_picks_the_deepest_mount() -> None:
    entry = mounts.mount_of("/proc/self")
    assert entry.mount_point == "/proc" and entry.fstype == "proc"


def test_escaped_mount_points(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text("36 35 98:0 / /mnt/with\\040space rw,noatime - ext4 /dev/sda1 rw\n")
    (entry,) = mounts.mount_table(str(info))
    assert entry.mount_point == "/mnt/with space"
    assert entry.line() == "/dev/sda1 on /mnt/with space type ext4 (rw,noatime,rw)"


def test_root_fs_has_a_block_device() -> None:
    devices = mounts.devices_under("/var/tmp")
    assert devices, "the scratch fs should sit on a block device"
    assert all(Path("/sys/class/block", d).exists() for d in devices)
