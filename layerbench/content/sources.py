"""Debian source packages, downloaded once into a cache outside the scratch root without
touching the host's apt configuration: a private sources dir with one `deb-src` entry and
private package lists, used through apt-get's -o options."""

import fcntl
import os
import shutil
import time
from pathlib import Path

from layerbench.content.cache import CACHE_DIR
from layerbench.core.errors import SetupError, UserError
from layerbench.linux import system

SOURCES_DIR = CACHE_DIR / "sources"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SUITE = "bookworm"
_LISTS_MAX_AGE_S = 7 * 86400


def _apt_options(apt_dir: Path) -> list[str]:
    return [
        "-o",
        "Dir::Etc::sourcelist=/dev/null",
        "-o",
        f"Dir::Etc::sourceparts={apt_dir / 'sources.list.d'}",
        "-o",
        f"Dir::State::Lists={apt_dir / 'lists'}",
        "-o",
        "APT::Sandbox::User=root",  # the cache belongs to root; apt's _apt user cannot write it
    ]


def _upstream_tarball(directory: Path) -> Path | None:
    """The package's source tarball: the upstream .orig one, or a native package's own."""
    tarballs = sorted(
        p
        for p in directory.iterdir()
        if ".tar." in p.name and ".debian.tar." not in p.name and p.suffix not in (".asc", ".json")
    )
    origs = [p for p in tarballs if ".orig.tar." in p.name and ".orig-" not in p.name]
    found = origs or tarballs
    return found[0] if found else None


def cached(package: str, *, suite: str = DEFAULT_SUITE) -> Path | None:
    """The package's source tarball if an earlier run downloaded it; None otherwise."""
    target = SOURCES_DIR / suite / package
    return _upstream_tarball(target) if target.is_dir() else None


def fetch(package: str, *, suite: str = DEFAULT_SUITE, mirror: str = DEFAULT_MIRROR) -> Path:
    """The cached source tarball of a Debian source package, downloading it the first time."""
    if system.tool_path("apt-get") is None:
        raise UserError(f"source package {package}: downloading it needs apt-get (Debian's apt)")
    apt_dir = SOURCES_DIR / f"apt-{suite}"
    target = SOURCES_DIR / suite / package
    SOURCES_DIR.mkdir(parents=True, exist_ok=True)
    with open(SOURCES_DIR / f"{suite}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs downloading at once
        if target.is_dir() and (found := _upstream_tarball(target)):
            return found
        (apt_dir / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (apt_dir / "sources.list.d").mkdir(exist_ok=True)
        entry = f"deb-src {mirror} {suite} main\n"
        source_list = apt_dir / "sources.list.d" / "layerbench-src.list"
        stale = not source_list.exists() or source_list.read_text() != entry
        source_list.write_text(entry)
        lists = list((apt_dir / "lists").glob("*Sources*"))
        if stale or not lists or time.time() - min(p.stat().st_mtime for p in lists) > _LISTS_MAX_AGE_S:
            try:
                system.run(["apt-get", *_apt_options(apt_dir), "update"], timeout=600)
            except SetupError as exc:
                raise UserError(f"source package {package}: cannot read {mirror} {suite}: {exc}") from None
        partial = target.with_name(package + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        try:
            system.run(
                [
                    "sh",
                    "-c",
                    'cd "$0" && exec "$@"',
                    str(partial),
                    "apt-get",
                    *_apt_options(apt_dir),
                    "source",
                    "--download-only",
                    package,
                ],
                timeout=1800,
            )
        except SetupError as exc:
            shutil.rmtree(partial, ignore_errors=True)
            raise UserError(f"source package {package}: download failed: {exc}") from None
        tarball = _upstream_tarball(partial)
        if tarball is None:
            raise UserError(f"source package {package}: no source tarball among {os.listdir(partial)}")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(partial, target)
        return target / tarball.name
