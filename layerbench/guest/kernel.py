"""The guest kernel: Debian's newest linux-image-*-amd64, downloaded with `apt-get download`
and unpacked with `dpkg -x` into the cache (never installed into the host's /boot), and the
initramfs layerbench builds from busybox-static and that kernel's own modules."""

import contextlib
import fcntl
import functools
import gzip
import hashlib
import io
import lzma
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from layerbench.content.cache import CACHE_DIR
from layerbench.core.errors import SetupError, UserError
from layerbench.linux import system

# What every guest loads at boot: virtio-mmio devices (microvm), its disk, ext4, the host's
# root over 9p, and the layers every guest stack may use (loop, overlay, a SCSI disk).
BOOT_MODULES = (
    "virtio_mmio",
    "virtio_blk",
    "crc16",
    "crc32c_generic",
    "mbcache",
    "jbd2",
    "ext4",
    "9pnet_virtio",
    "9p",
    "loop",
    "overlay",
    "virtio_scsi",
    "sd_mod",
)
# In the initramfs but loaded only by a guest whose layers or workload name them
# (Layer.kernel_modules, Workload.kernel_modules_for): under tcg every module costs boot
# time, and dm, md, NFS and autofs together took about a second of each guest's boot.
ON_REQUEST_MODULES = (
    "dm_mod",
    "dm_crypt",
    "xts",
    "algif_skcipher",
    "dm_thin_pool",
    "dm_snapshot",
    "md_mod",
    "raid1",
    "nfsd",
    "nfsv3",
    "nfsv4",
    "autofs4",
)
# What a module needs at run time that its modinfo does not name: dm-crypt's cipher mode,
# and the kernel's crypto API for programs (cryptsetup encrypts its key slots through it).
COMPANIONS = {"dm_crypt": ("xts", "algif_skcipher")}
WANTED_MODULES = BOOT_MODULES + ON_REQUEST_MODULES
# A stock kernel; the cloud flavour lacks 9p, rt and dbg are not what a guest runs.
_IMAGE_NAME = re.compile(r"^linux-image-(\d[\w.+~]*-amd64)$")
_BUSYBOX = Path("/bin/busybox")


def cache_dir() -> Path:
    return CACHE_DIR / "vm"


@dataclass(frozen=True)
class GuestKernel:
    release: str  # e.g. 6.12.117+deb12-amd64
    vmlinuz: Path
    initramfs: Path

    @property
    def modules_dir(self) -> Path:
        return self.vmlinuz.parent / "tree" / "lib" / "modules" / self.release

    def modules_on_request(self, names: list[str]) -> list[str]:
        """The initramfs's module files a guest loads after its boot modules for these
        modules (companions and dependencies first), in order."""
        wanted = [n.replace("-", "_") for n in names]
        wanted = [*wanted, *(c for n in wanted for c in COMPANIONS.get(n, ()))]
        unknown = sorted(set(wanted) - set(WANTED_MODULES))
        if unknown:
            raise SetupError(f"guest kernel: no module {', '.join(unknown)} in the initramfs")
        at_boot = {_module_name(p) for p in module_order(self.modules_dir, BOOT_MODULES)}
        return [
            f"{_module_name(p)}.ko"
            for p in module_order(self.modules_dir, tuple(wanted))
            if _module_name(p) not in at_boot
        ]


@functools.cache
def newest_image_package() -> str:
    """The newest stock linux-image-*-amd64 apt knows (apt-get update fetched the lists)."""
    try:
        listing = system.run(["apt-cache", "search", "--names-only", "^linux-image-[0-9].*-amd64$"])
    except SetupError as exc:
        raise UserError(f"vm layer: cannot ask apt for a guest kernel ({exc})") from None
    names = [line.split(" - ")[0].strip() for line in listing.splitlines()]
    names = [n for n in names if _IMAGE_NAME.match(n) and "-cloud-" not in n and "-rt-" not in n]
    if not names:
        raise UserError(
            "vm layer: apt knows no linux-image-*-amd64 package for the guest kernel; run apt-get update"
        )
    return max(names, key=functools.cmp_to_key(_compare_versions))


def _release_of(package: str) -> str:
    """The kernel release in a linux-image package's name (one newest_image_package chose)."""
    found = _IMAGE_NAME.match(package)
    assert found is not None, f"{package} is no linux-image package"
    return found.group(1)


def _compare_versions(left: str, right: str) -> int:
    a = _release_of(left)
    b = _release_of(right)
    if a == b:
        return 0
    newer = subprocess.run(["dpkg", "--compare-versions", a, "gt", b], check=False).returncode == 0
    return 1 if newer else -1


def guest_kernel() -> GuestKernel:
    """The cached kernel and initramfs, fetched and built on first use (untimed)."""
    package = newest_image_package()
    release = _release_of(package)
    home = cache_dir() / release
    home.mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs fetching the same kernel at once
        vmlinuz = home / "vmlinuz"
        if not vmlinuz.exists():
            _fetch(package, release, home)
        # Named by what goes into it, so a changed init script or module list rebuilds it.
        recipe = hashlib.sha256((INIT_SCRIPT + ",".join(WANTED_MODULES)).encode()).hexdigest()[:12]
        initramfs = home / f"initramfs-{recipe}.cpio.gz"
        if not initramfs.exists():
            _build_initramfs(home / "tree" / "lib" / "modules" / release, initramfs)
    return GuestKernel(release=release, vmlinuz=vmlinuz, initramfs=initramfs)


def _fetch(package: str, release: str, home: Path) -> None:
    with tempfile.TemporaryDirectory(dir=home) as download:
        # apt drops to the _apt user to download; let it write here.
        with contextlib.suppress(KeyError, OSError):
            shutil.chown(download, user="_apt")
        done = subprocess.run(
            ["apt-get", "download", "-q", package],
            cwd=download,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"vm layer: cannot download the guest kernel {package} ({last})")
        deb = next(Path(download).glob("*.deb"))
        tree = home / "tree"
        shutil.rmtree(tree, ignore_errors=True)
        system.run(["dpkg", "-x", str(deb), str(tree)], timeout=1800)
    shutil.copyfile(tree / "boot" / f"vmlinuz-{release}", home / "vmlinuz.part")
    os.replace(home / "vmlinuz.part", home / "vmlinuz")


# ---- the initramfs ------------------------------------------------------------------------


@functools.cache  # a guest trial asks for its stack's modules: the tree is read once
def module_order(modules_dir: Path, wanted: tuple[str, ...] = WANTED_MODULES) -> tuple[Path, ...]:
    """The module files to load, each after what it depends on; built-in ones are skipped."""
    builtin = _builtin(modules_dir)
    files = {_module_name(p): p for p in modules_dir.rglob("*.ko*")}
    ordered: list[Path] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        name = name.replace("-", "_")
        if name in seen or name in builtin:
            return
        seen.add(name)
        path = files.get(name)
        if path is None:
            raise SetupError(f"guest kernel {modules_dir.name} has no module {name}")
        for dependency in _depends(_module_bytes(path)):
            visit(dependency)
        ordered.append(path)

    for name in wanted:
        visit(name)
    return tuple(ordered)


def _module_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    # busybox insmod may not read compressed modules: they are stored plain.
    if path.name.endswith(".xz"):
        return lzma.decompress(data)
    if path.name.endswith(".gz"):
        return gzip.decompress(data)
    return data


def _depends(module: bytes) -> list[str]:
    """The modules it needs, from its .modinfo strings (what modinfo -F depends prints)."""
    found = re.search(rb"\0depends=([^\0]*)\0", module)
    return [name for name in found.group(1).decode().split(",") if name] if found else []


def _module_name(path: Path) -> str:
    return path.name.split(".ko")[0].replace("-", "_")


def _builtin(modules_dir: Path) -> set[str]:
    listing = modules_dir / "modules.builtin"
    if not listing.exists():
        return set()
    return {_module_name(Path(line)) for line in listing.read_text().split()}


INIT_SCRIPT = r"""#!/bin/sh
# layerbench guest init: load modules, mount the host's root read-only over 9p and the
# trial's share read-write, chroot into the host's root and run the agent, then stop
# (reboot=t with qemu's -no-reboot ends qemu).
export PATH=/bin
echo "layerbench-init: started"
mount -t devtmpfs dev /dev
mount -t proc proc /proc
mount -t sysfs sys /sys
echo "layerbench-init: uptime $(cat /proc/uptime), loading modules"
for module in $(cat /modules.order); do
    insmod "/modules/$module" || echo "layerbench-init: insmod $module failed"
done
echo "layerbench-init: uptime $(cat /proc/uptime), modules loaded"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 lbshare /share || reboot -f
. /share/boot.env
for module in $MODULES; do
    insmod "/modules/$module" || echo "layerbench-init: insmod $module failed"
done
echo "layerbench-init: uptime $(cat /proc/uptime), the stack's modules loaded ($MODULES)"
# The host root is only read: let the guest cache it, or every import crosses 9p.
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro,cache=loose hostroot /newroot
mount -o bind /share "/newroot$SHARE"  # a virtio 9p channel mounts only once
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t devtmpfs dev /newroot/dev
mount -t tmpfs tmp /newroot/tmp
mount -t tmpfs run /newroot/run
mount -t "$DISK_FS" "$DISK_DEVICE" "/newroot$DISK_MOUNT" || echo "layerbench-init: cannot mount $DISK_DEVICE"
if [ -n "$WORK_MOUNT" ]; then
    mount -t 9p -o "trans=virtio,version=9p2000.L,$WORK_OPTIONS" lbwork "/newroot$WORK_MOUNT" \
        || echo "layerbench-init: cannot mount the 9p share $WORK_MOUNT"
fi
echo "layerbench-init: uptime $(cat /proc/uptime), starting the agent"
chroot /newroot /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root PYTHONPATH="$PYTHONPATH" PYTHONDONTWRITEBYTECODE=1 \
    LAYERBENCH_TEST_SYNC_TOP_ONLY="$SYNC_TOP_ONLY" \
    "$PYTHON" -S -m layerbench.guest.agent "$SHARE"
sync
umount "/newroot$DISK_MOUNT"
reboot -f
"""


def _build_initramfs(modules_dir: Path, target: Path) -> None:
    if not _BUSYBOX.exists():
        raise UserError("vm layer: busybox is missing; install it with: apt-get install busybox-static")
    archive = _Cpio()
    for directory in ("bin", "dev", "proc", "sys", "share", "newroot", "modules"):
        archive.add_dir(directory)
    archive.add_file("bin/busybox", _BUSYBOX.read_bytes(), 0o755)
    for applet in ("sh", "mount", "umount", "insmod", "chroot", "reboot", "sync", "cat", "echo"):
        archive.add_symlink(f"bin/{applet}", "busybox")
    at_boot = {_module_name(path) for path in module_order(modules_dir, BOOT_MODULES)}
    names = []
    for path in module_order(modules_dir):
        name = f"{_module_name(path)}.ko"
        archive.add_file(f"modules/{name}", _module_bytes(path), 0o644)
        if _module_name(path) in at_boot:
            names.append(name)
    archive.add_file("modules.order", ("\n".join(names) + "\n").encode(), 0o644)
    archive.add_file("init", INIT_SCRIPT.encode(), 0o755)
    part = target.with_suffix(".part")
    part.write_bytes(gzip.compress(archive.finish()))
    os.replace(part, target)


class _Cpio:
    """The kernel's initramfs format: cpio "newc" with a TRAILER!!! entry."""

    def __init__(self) -> None:
        self.out = io.BytesIO()
        self.inode = 1

    def _entry(self, name: str, mode: int, data: bytes) -> None:
        encoded = name.encode() + b"\0"
        fields = [self.inode, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0]
        self.inode += 1
        self.out.write(b"070701" + b"".join(f"{v:08x}".encode() for v in fields) + encoded)
        self.out.write(b"\0" * (-self.out.tell() % 4) + data)
        self.out.write(b"\0" * (-self.out.tell() % 4))

    def add_dir(self, name: str) -> None:
        self._entry(name, 0o040755, b"")

    def add_file(self, name: str, data: bytes, mode: int) -> None:
        self._entry(name, 0o100000 | mode, data)

    def add_symlink(self, name: str, target: str) -> None:
        self._entry(name, 0o120777, target.encode())

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0, b"")
        return self.out.getvalue()
