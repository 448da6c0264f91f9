"""Worlds: the userland tree (compiler, headers, libraries, shell tools) a stack exposes
to a chroot through its layers, as the FreeBSD report's `make installworld DESTDIR=...`.

`host` assembles the files of the host's own toolchain packages (build-essential and the
tools a configure script calls, with everything they depend on) once into a cache outside
the scratch root. A path names a ready tree, e.g. one made by
`debootstrap --variant=buildd bookworm DIR`.
"""

import fcntl
import hashlib
import os
import subprocess
from pathlib import Path

from layerbench.content.cache import CACHE_DIR
from layerbench.core.errors import SetupError, UserError
from layerbench.linux import system

WORLDS_DIR = CACHE_DIR / "worlds"
HOST = "host"

# What a C build and its configure scripts call; each with its installed dependencies.
HOST_PACKAGES = (
    "build-essential",
    "bash",
    "dash",
    "coreutils",
    "diffutils",
    "findutils",
    "grep",
    "sed",
    "gawk",
    "mawk",
    "make",
    "patch",
    "perl-base",
    "gzip",
    "bzip2",
    "xz-utils",
    "tar",
    "hostname",
    "libc-bin",
    "ncurses-bin",
)
# Not needed to compile; skipping them keeps the world small (~350 MB).
_SKIP_PREFIXES = (
    "usr/share/doc/",
    "usr/share/man/",
    "usr/share/info/",
    "usr/share/locale/",
    "usr/share/lintian/",
)
# /etc pieces the dynamic loader reads.
_ETC = ("etc/ld.so.cache", "etc/ld.so.conf", "etc/ld.so.conf.d", "etc/passwd", "etc/group")
# Top-level names a jail makes itself rather than taking from the world.
JAIL_OWN = frozenset({"dev", "proc", "sys", "tmp", "run", "usr", "ro", "root", "home", "var", "mnt", "media"})


def check_spec(spec: str) -> str:
    """A world is `host` or an absolute path to a tree with a shell; raises ValueError."""
    if spec == HOST:
        return spec
    path = Path(spec)
    if not path.is_absolute():
        raise ValueError(f'{spec!r}: a world is "host" or an absolute path to a userland tree')
    if not (path / "bin" / "sh").exists() and not (path / "usr" / "bin" / "sh").exists():
        raise ValueError(f"{spec!r}: not a userland tree (no bin/sh in it); make one with debootstrap")
    return spec


def resolve(spec: str) -> Path:
    """The directory holding the world, assembling the host's once (untimed)."""
    if spec != HOST:
        return Path(spec)
    return _host_world()


def _installed_closure() -> list[str]:
    done = subprocess.run(
        [
            "apt-cache",
            "depends",
            "--recurse",
            "--installed",
            "--no-recommends",
            "--no-suggests",
            "--no-conflicts",
            "--no-breaks",
            "--no-replaces",
            "--no-enhances",
            *HOST_PACKAGES,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    names = {line.strip() for line in done.stdout.splitlines() if line and not line.startswith((" ", "<"))}
    # apt-cache names packages that are not installed when asked for them directly.
    status = subprocess.run(
        ["dpkg-query", "-W", "-f", "${db:Status-Status} ${Package}\n", *sorted(names)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    installed = sorted(line.split()[1] for line in status.splitlines() if line.startswith("installed "))
    if "build-essential" not in installed:
        raise UserError('world "host" needs the host\'s compiler: apt-get install build-essential')
    return installed


def _versions(packages: list[str]) -> str:
    return system.run(["dpkg-query", "-W", "-f", "${Package}=${Version}\n", *packages])


def _canonical(path: str) -> str | None:
    """Where a packaged path really lives (merged /usr: /bin/sh is usr/bin/sh), relative to /."""
    parent, name = os.path.split(path.rstrip("/"))
    if not name:
        return None
    real = os.path.join(os.path.realpath(parent or "/"), name)
    if not os.path.lexists(real):
        return None
    return real.lstrip("/")


def _alternatives(paths: set[str]) -> set[str]:
    """Commands that are alternatives (cc, c++, awk, ...) whose chosen program is in the
    world: the link in usr/bin and its entry in /etc/alternatives, owned by no package."""
    found = set()
    for directory in ("usr/bin", "usr/sbin"):
        with os.scandir("/" + directory) as entries:
            for entry in entries:
                if not entry.is_symlink():
                    continue
                link = os.readlink(entry.path)
                if (
                    link.startswith("/etc/alternatives/")
                    and _canonical(os.path.realpath(entry.path)) in paths
                ):
                    found |= {f"{directory}/{entry.name}", link.lstrip("/")}
    return found | ({"etc/alternatives"} if found else set())


def _host_world() -> Path:
    if system.tool_path("apt-cache") is None or system.tool_path("dpkg-query") is None:
        raise UserError('world "host" reads the host\'s packages with apt-cache and dpkg-query (Debian only)')
    packages = _installed_closure()
    fingerprint = hashlib.sha256(_versions(packages).encode()).hexdigest()[:12]
    WORLDS_DIR.mkdir(parents=True, exist_ok=True)
    world = WORLDS_DIR / f"host-{fingerprint}"
    with open(WORLDS_DIR / f"host-{fingerprint}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs assembling the same world at once
        if not world.is_dir():
            _assemble(packages, world)
    return world


def _assemble(packages: list[str], world: Path) -> None:
    listing = system.run(["dpkg-query", "-L", *packages], timeout=300)
    paths = {"usr", "etc"}
    for line in listing.splitlines():
        if not line.startswith("/"):
            continue
        real = _canonical(line)
        if real and not real.startswith(_SKIP_PREFIXES):
            paths.add(real)
    for piece in _ETC:
        if os.path.isdir("/" + piece):
            paths.add(piece)
            paths.update(os.path.join(piece, name) for name in os.listdir("/" + piece))
        elif os.path.lexists("/" + piece):
            paths.add(piece)
    paths.update(_alternatives(paths))
    # The merged-/usr links (bin -> usr/bin ...) as the host has them.
    paths.update(name for name in ("bin", "sbin", "lib", "lib32", "lib64") if os.path.islink("/" + name))
    partial = world.with_name(world.name + ".partial")
    if partial.exists():
        system.run(["rm", "-rf", "--one-file-system", str(partial)])
    partial.mkdir()
    file_list = partial.with_name(world.name + ".files")
    file_list.write_text("\n".join(sorted(paths)) + "\n")
    try:
        packer = subprocess.Popen(
            [
                "tar",
                "-c",
                "-f",
                "-",
                "-C",
                "/",
                "--no-recursion",
                "--verbatim-files-from",
                "-T",
                str(file_list),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        unpacker = subprocess.run(
            ["tar", "-x", "-C", str(partial), "-f", "-"], stdin=packer.stdout, check=False
        )
        assert packer.stdout is not None
        packer.stdout.close()
        if packer.wait() != 0 or unpacker.returncode != 0:
            raise SetupError(f"assembling the host world in {partial} failed")
        os.replace(partial, world)
    finally:
        file_list.unlink(missing_ok=True)


# ---- a world inside a stack ---------------------------------------------------------------


def visible(world: Path, path: Path) -> bool:
    """Whether the tree at path shows the world (its top-level names are all there)."""
    try:
        wanted = set(os.listdir(world))
        return bool(wanted) and wanted <= set(os.listdir(path))
    except OSError:
        return False


def copy_into(world: Path, target: Path, *, link: bool = False) -> None:
    """Put the world at target's root, untimed: hard links when asked and possible (the
    same file system: no data copied, the same inodes as the cache), else a full copy."""
    same_fs = os.stat(world).st_dev == os.stat(target).st_dev
    try:
        system.run(
            ["cp", "-a", *(["-l"] if link and same_fs else []), f"{world}/.", str(target)], timeout=1800
        )
    except SetupError as exc:
        raise SetupError(f"cannot put the world into {target} (a read-only layer?): {exc}") from None
