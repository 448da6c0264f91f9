"""Running the host's tools: one place that turns a failed command into a clear error."""

import fcntl
import os
import shutil
import struct
import subprocess
from collections.abc import Sequence

from layerbench.core.errors import SetupError, UserError

# The Debian package that provides each external tool, for the "install X" hint.
PACKAGE_OF_TOOL: dict[str, str] = {
    "mount": "mount",
    "umount": "mount",
    "losetup": "mount",
    "cryptsetup": "cryptsetup-bin",
    "mdadm": "mdadm",
    "lvcreate": "lvm2",
    "thin_check": "thin-provisioning-tools",
    "rpcbind": "rpcbind",
    "rpc.mountd": "nfs-kernel-server",
    "rpc.nfsd": "nfs-kernel-server",
    "nfsdcld": "nfs-kernel-server",
    "exportfs": "nfs-kernel-server",
    "mount.nfs": "nfs-common",
    "nsenter": "util-linux",
    "ip": "iproute2",
    "mkfs.ext4": "e2fsprogs",
    "mkfs.xfs": "xfsprogs",
    "mkfs.btrfs": "btrfs-progs",
    "tar": "tar",
    "dd": "coreutils",
    "sync": "coreutils",
    "zstd": "zstd",
    "xz": "xz-utils",
    "fio": "fio",
    "mksquashfs": "squashfs-tools",
    "mkfs.erofs": "erofs-utils",
    "fuse-overlayfs": "fuse-overlayfs",
    "bindfs": "bindfs",
    "squashfuse_ll": "squashfuse",
    "sshfs": "sshfs",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "/usr/sbin/sshd": "openssh-server",
    "unshare": "util-linux",
    "fusermount3": "fuse3",
    "qemu-system-x86_64": "qemu-system-x86",
    "busybox": "busybox-static",
    "time": "time",
    "chroot": "coreutils",
    "apt-get": "apt",
}


def tool_path(name: str) -> str | None:
    return shutil.which(name)


def require_tool(name: str) -> str:
    path = tool_path(name)
    if path is None:
        package = PACKAGE_OF_TOOL.get(name, name)
        raise UserError(f"the tool {name!r} is missing; install it with: apt-get install {package}")
    return path


def run(argv: Sequence[str], *, input_text: str | None = None, timeout: float = 600) -> str:
    """Run a setup/teardown command and return its stdout; raise SetupError on failure."""
    try:
        done = subprocess.run(
            list(argv),
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise SetupError(f"{argv[0]}: not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise SetupError(f"{' '.join(argv)}: timed out after {timeout:.0f}s") from exc
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        last = detail[-1] if detail else f"exit status {done.returncode}"
        raise SetupError(f"{' '.join(argv)}: {last}")
    return done.stdout


def tool_version(name: str, flag: str = "--version") -> str | None:
    """First line of a tool's version output, or None if it is not installed."""
    path = tool_path(name)
    if path is None:
        return None
    try:
        done = subprocess.run([path, flag], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (done.stdout or done.stderr).strip()
    return text.splitlines()[0] if text else None


# FS_IOC_GETFLAGS / FS_IOC_SETFLAGS (an int's worth of inode flags) and FS_TOPDIR_FL.
_GETFLAGS, _SETFLAGS, _TOPDIR = 0x80086601, 0x40086602, 0x00020000


def spread_subdirectories(directory: str | os.PathLike[str]) -> bool:
    """Mark a directory as a top of hierarchies (chattr +T): ext2/3/4 then place each new
    subdirectory in an inode group of its own choosing (Orlov), as for a directory made at
    the file system's root, instead of beside its siblings. Whether the file system took it."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = struct.unpack("i", fcntl.ioctl(fd, _GETFLAGS, struct.pack("i", 0)))[0]
        fcntl.ioctl(fd, _SETFLAGS, struct.pack("i", flags | _TOPDIR))
        return bool(struct.unpack("i", fcntl.ioctl(fd, _GETFLAGS, struct.pack("i", 0)))[0] & _TOPDIR)
    except OSError:  # a file system without inode flags (tmpfs, overlay, FUSE ...)
        return False
    finally:
        os.close(fd)
