"""Source archives a workload unpacks: built-in ones (real source trees of this machine,
packed once into a cache outside the scratch root and reused by every run), a Debian source
package's upstream tarball (`debian:linux`: downloaded once into the same cache, see
sources.py), or a tar archive of the user's."""

import contextlib
import fcntl
import functools
import json
import os
import re
import sysconfig
import tarfile
from dataclasses import dataclass
from pathlib import Path

from layerbench.content import sources
from layerbench.content.cache import CACHE_DIR
from layerbench.core.errors import UserError
from layerbench.linux import system

_STDLIB = sysconfig.get_paths()["stdlib"]
_EXCLUDES = ["--exclude=__pycache__", "--exclude=site-packages", "--exclude=dist-packages", "--exclude=*.pyc"]

# name -> (candidate trees in order, minimum number of files)
BUILTIN: dict[str, tuple[list[str], int]] = {
    # The seed extracted an OS source tree; this is the closest real tree every host has.
    "source-tree": (
        ["/usr/include", _STDLIB, "/usr/lib/python3.11", "/usr/share/perl", "/usr/share/doc"],
        10_000,
    ),
    # Enough files for per-file costs (a FUSE round trip each) to stand out in a quick run.
    "medium-tree": ([_STDLIB, "/usr/include/linux", "/usr/include/c++", "/usr/include"], 3000),
    "small-tree": ([f"{_STDLIB}/email", f"{_STDLIB}/asyncio", "/usr/include/linux"], 300),
}


# What each built-in tree unpacks to, at most, before it is first packed (then its own
# description in the cache says).
_BUILTIN_ESTIMATE = {"source-tree": 320 * 2**20, "medium-tree": 160 * 2**20, "small-tree": 24 * 2**20}
_UNPACKED_PER_PACKED = 6  # a compressed source tarball unpacks to at most about this much
_DEBIAN = re.compile(r"^debian:([a-z0-9][a-z0-9+.-]+)$")
# Before the first download: (packed, unpacked) bytes of the packages people ask for (the
# kernel's source: Phoronix's unpack-linux); an unknown package counts as small until fetched.
_DEBIAN_ESTIMATE = {"linux": (160 * 2**20, 1600 * 2**20)}


def debian_package(spec: str) -> str | None:
    """The source package a `debian:NAME` spec names; None for any other spec."""
    found = _DEBIAN.match(spec)
    return found[1] if found else None


def _cached_debian(package: str) -> Path | None:
    return sources.cached(package)


def packed_size(spec: str) -> int:
    """The bytes of the archive file itself (what a workload stages), known up front."""
    if spec.startswith("builtin:"):
        return archive_estimate(spec)
    if (package := debian_package(spec)) is not None:
        cached = _cached_debian(package)
        return cached.stat().st_size if cached else _DEBIAN_ESTIMATE.get(package, (0, 0))[0]
    return Path(spec).stat().st_size if Path(spec).is_file() else 0


def archive_estimate(spec: str) -> int:
    """The bytes an archive unpacks to, known without packing or reading it whole."""
    if spec.startswith("builtin:"):
        name = spec.removeprefix("builtin:")
        meta = CACHE_DIR / f"{name}.json"
        try:
            return int(json.loads(meta.read_text())["bytes"] * 1.25)  # plus directories and blocks
        except (OSError, ValueError, KeyError):
            return _BUILTIN_ESTIMATE.get(name, 0)
    if (package := debian_package(spec)) is not None:
        cached = _cached_debian(package)
        if cached is None:
            return _DEBIAN_ESTIMATE.get(package, (0, 0))[1]
        with contextlib.suppress(OSError, ValueError, KeyError):  # its listing, once read
            return int(json.loads(_listing_file(cached).read_text())["bytes"] * 1.25)
        return cached.stat().st_size * _UNPACKED_PER_PACKED
    path = Path(spec)
    size = path.stat().st_size if path.is_file() else 0
    return size * (_UNPACKED_PER_PACKED if path.suffix in _COMPRESSION else 1)


@dataclass(frozen=True)
class Archive:
    path: Path
    files: int  # regular files in it
    bytes: int  # their total size, extracted
    compression: str | None


def _count_files(tree: str) -> int:
    total = 0
    for _root, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", "site-packages", "dist-packages")]
        total += len(files)
    return total


def builtin_archive(name: str) -> Archive:
    """The cached tarball of a built-in tree, packing it first if needed."""
    if name not in BUILTIN:
        valid = ", ".join(f"builtin:{n}" for n in BUILTIN)
        raise UserError(f"unknown built-in archive builtin:{name}; valid: {valid}")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tarball = CACHE_DIR / f"{name}.tar"
    meta = CACHE_DIR / f"{name}.json"
    with open(CACHE_DIR / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs packing the same tree at once
        if not (tarball.exists() and meta.exists()):
            candidates, minimum = BUILTIN[name]
            trees, files = [], 0
            for tree in candidates:
                if files >= minimum:
                    break
                if os.path.isdir(tree):
                    trees.append(tree.lstrip("/"))
                    files += _count_files(tree)
            partial = tarball.with_suffix(".partial")
            system.run(["tar", "-cf", str(partial), *_EXCLUDES, "-C", "/", *trees], timeout=1800)
            described = describe(partial)
            os.replace(partial, tarball)
            meta.write_text(json.dumps({"files": described.files, "bytes": described.bytes, "trees": trees}))
        facts = json.loads(meta.read_text())
    return Archive(path=tarball, files=facts["files"], bytes=facts["bytes"], compression=None)


_COMPRESSION = {".gz": "gz", ".tgz": "gz", ".xz": "xz", ".bz2": "bz2", ".zst": "zst"}
TAR_FLAG = {"gz": "-z", "xz": "-J", "bz2": "-j", "zst": "--zstd"}  # by Archive.compression


def check_spec(value: str, *, what: str = "archive", others: str = "") -> str:
    """A plan's `builtin:NAME` or path to a tar archive, or ValueError saying what is valid
    (others: further valid values to name first, e.g. "top, ")."""
    if value.startswith("builtin:"):
        if value.removeprefix("builtin:") not in BUILTIN:
            valid = ", ".join(f"builtin:{name}" for name in BUILTIN)
            raise ValueError(
                f"unknown built-in {what} {value!r}; valid: {others}{valid}, debian:PACKAGE or a tar archive"
            )
        return value
    if value.startswith("debian:"):
        if debian_package(value) is None:
            raise ValueError(f"{value!r}: debian:PACKAGE names a Debian source package, e.g. debian:linux")
        return value
    if not Path(value).is_file():
        raise ValueError(
            f"no such archive file {value!r}; give {others}builtin:NAME, debian:PACKAGE or a tar archive"
        )
    return value


def resolve(spec: str) -> Archive:
    """The archive a checked spec names (a built-in one packed first, once)."""
    if spec.startswith("builtin:"):
        return builtin_archive(spec.removeprefix("builtin:"))
    if (package := debian_package(spec)) is not None:
        return _described(sources.fetch(package))  # downloaded once, untimed
    return user_archive(Path(spec))


def _described(path: Path) -> Archive:
    """A downloaded tarball's listing, read once per file and kept beside it: the plan's
    space check then knows what it unpacks to (the kernel's: 9 times its .xz)."""
    stat = path.stat()
    archive = _describe_once(path, stat.st_mtime_ns, stat.st_size)
    listing = _listing_file(path)
    if not listing.exists():
        listing.write_text(json.dumps({"files": archive.files, "bytes": archive.bytes}))
    return archive


def _listing_file(tarball: Path) -> Path:
    return tarball.with_name(tarball.name + ".layerbench.json")


@functools.lru_cache(maxsize=16)
def _describe_once(path: Path, mtime_ns: int, size: int) -> Archive:
    """Listing a big tarball (the kernel's: 80,000 files) takes seconds: once per file."""
    return describe(path)


def unpack(archive: Archive, directory: Path) -> None:
    """Untimed: the archive's tree into directory."""
    flag = [TAR_FLAG[archive.compression]] if archive.compression else []
    system.run(["tar", "-x", *flag, "-f", str(archive.path), "-C", str(directory)], timeout=3600)


def user_archive(path: Path) -> Archive:
    """A user's tarball, read (never written): count what it holds once."""
    if not path.is_file():
        raise UserError(f"archive {path}: no such file")
    return describe(path)


def describe(path: Path) -> Archive:
    compression = _COMPRESSION.get(path.suffix)
    files = size = 0
    try:
        if compression == "zst":
            listing = system.run(["tar", "--zstd", "-tvf", str(path)], timeout=1800)
            for line in listing.splitlines():
                if line.startswith("-"):
                    files += 1
                    size += int(line.split()[2])
        else:
            with tarfile.open(path) as tar:
                for member in tar:
                    if member.isfile():
                        files += 1
                        size += member.size
    except (tarfile.TarError, OSError, ValueError) as exc:
        raise UserError(f"archive {path}: cannot be read as a tar archive ({exc})") from None
    return Archive(path=path, files=files, bytes=size, compression=compression)
