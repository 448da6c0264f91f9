"""fuse: a FUSE passthrough of the layer below (bindfs), the userspace counterpart of a
bind mount. Its daemon's CPU time is not in the workload's rusage; the stack reports the
daemon's pid so each run records it as helper CPU."""

import contextlib
import subprocess
import time
from abc import abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from pydantic import Field, field_validator

from layerbench.core.errors import SetupError
from layerbench.linux import mounts
from layerbench.scratch import Scratch, unmount_path
from layerbench.stacks.base import BuildContext, Exposed, Layer, LayerOptions, OptionsT, register

_MOUNT_WAIT_S = 15.0


class FuseOptions(LayerOptions):
    # bindfs serves one request at a time unless told otherwise (since bindfs 1.11).
    multithreaded: bool = False
    kernel_cache: bool = False  # keep file data cached in the kernel across opens
    attr_timeout: float | None = Field(default=None, ge=0, description="seconds attributes stay cached")
    entry_timeout: float | None = Field(default=None, ge=0, description="seconds names stay cached")
    options: list[str] = []  # any further `-o` options for bindfs/FUSE, e.g. ["negative_timeout=1"]
    arguments: list[str] = []  # further bindfs command-line flags, e.g. ["--xattr-none"]

    @field_validator("options", "arguments")
    @classmethod
    def _no_blanks(cls, values: list[str]) -> list[str]:
        for value in values:
            if not value.strip() or "\x00" in value:
                raise ValueError(f"{value!r} is not a usable option")
        return values


def one_option_each(values: list[str]) -> list[str]:
    """A FUSE daemon's `-o` options as a list, one per item (they are joined with commas)."""
    for value in values:
        if not value.strip() or "\x00" in value or "," in value:
            raise ValueError(f"{value!r} is not one usable option (one per list item)")
    return values


def bindfs_argv(options: FuseOptions, source: Path, target: Path) -> list[str]:
    """The bindfs command line: in the foreground, so the pid we hold is the daemon."""
    argv = ["bindfs", "-f"]
    if options.multithreaded:
        argv.append("--multithreaded")
    fuse_options = []
    if options.readonly:
        fuse_options.append("ro")
    if options.kernel_cache:
        fuse_options.append("kernel_cache")
    if options.attr_timeout is not None:
        fuse_options.append(f"attr_timeout={options.attr_timeout:g}")
    if options.entry_timeout is not None:
        fuse_options.append(f"entry_timeout={options.entry_timeout:g}")
    fuse_options += options.options
    if fuse_options:
        argv += ["-o", ",".join(fuse_options)]
    return [*argv, *options.arguments, str(source), str(target)]


@contextlib.contextmanager
def _journaled_mount(scratch: Scratch, target: Path) -> Iterator[None]:
    """A mount someone else makes (the daemon): journaled first, unmounted on the way out."""
    ident = scratch.journal.add("mount", target)
    try:
        yield
    finally:
        unmount_path(str(target), hurry=scratch.hurry)
        scratch.journal.done(ident)


def _wait_until_mounted(
    target: Path, daemon: subprocess.Popen[bytes], log: Path, name: str
) -> mounts.MountEntry:
    deadline = time.monotonic() + _MOUNT_WAIT_S
    while time.monotonic() < deadline:
        entry = mounts.mount_of(target)
        if entry.mount_point == str(target) and entry.fstype.startswith("fuse"):
            return entry
        if daemon.poll() is not None:
            said = log.read_text(errors="replace").strip().splitlines()
            raise SetupError(f"{name} exited with status {daemon.returncode}: {said[-1] if said else ''}")
        time.sleep(0.02)
    raise SetupError(f"{name} did not mount {target} within {_MOUNT_WAIT_S:.0f}s")


class FuseDaemonLayer(Layer[OptionsT]):
    """A layer whose top a FUSE daemon serves: started in a session of its own, journaled,
    waited for until it has mounted, stopped after the unmount. Each kind (bindfs, sshfs,
    squashfuse, fuse-overlayfs) names its daemon and gives its command line from its own
    options."""

    filesystems = ("fuse",)
    daemon_name: ClassVar[str]

    @abstractmethod
    def daemon_argv(self, source: Path, target: Path) -> list[str]:
        """The daemon's command line, in the foreground (the pid held is the daemon's)."""

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        target = ctx.subdir(f"L{self.index}-fuse")
        name = self.daemon_name
        log = ctx.workdir / f"L{self.index}-{name}.log"
        argv = self.daemon_argv(below.path, target)

        def start() -> subprocess.Popen[bytes]:
            with open(log, "wb") as handle:
                # Its own session: a Ctrl-C at the terminal reaches layerbench, which
                # unmounts and stops the daemon in order, not the daemon first.
                return subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=handle, stderr=handle, start_new_session=True
                )

        # Exits inside out: unmount while the daemon still serves, then stop it.
        with (
            ctx.scratch.process(start, f"{name} {target}", named=target) as daemon,
            _journaled_mount(ctx.scratch, target),
        ):
            entry = _wait_until_mounted(target, daemon, log, name)
            line = f"{entry.line()} [{name} pid {daemon.pid}: {' '.join(argv)}]"
            yield Exposed(path=target, mount_lines=[line], helper_pids=[daemon.pid], fs_size=below.fs_size)


@register
class FuseLayer(FuseDaemonLayer[FuseOptions]):
    kind = "fuse"
    Options = FuseOptions
    summary = "a FUSE passthrough (bindfs) of the layer below; its daemon's CPU is recorded"
    tools = ("bindfs", "umount")
    daemon_name = "bindfs"

    def daemon_argv(self, source: Path, target: Path) -> list[str]:
        return bindfs_argv(self.options, source, target)
