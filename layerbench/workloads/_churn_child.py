"""The timed child of the churn workload: mount/unmount cycles of one layer, through its
own expose(), with latencies, failures, leaks and the kernel log, written as JSON."""

import contextlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from layerbench.core import failpoints
from layerbench.core.errors import SetupError
from layerbench.linux import mounts
from layerbench.scratch import Scratch
from layerbench.stacks.base import LAYER_KINDS, BuildContext, Exposed, load_kinds
from layerbench.workloads import _automount

_ALARM = re.compile(r"Oops|BUG[: ]|WARNING:|blocked for more than|hung_task|general protection fault")


class KernelLog:
    """New /dev/kmsg records since the start, and those that look like trouble."""

    def __init__(self) -> None:
        try:
            self.fd: int | None = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
            os.lseek(self.fd, 0, os.SEEK_END)
        except OSError:
            self.fd = None

    def read_new(self) -> dict[str, Any]:
        if self.fd is None:
            return {"checked": False, "new_lines": 0, "alarms": 0, "lines": []}
        new = 0
        alarms: list[str] = []
        while True:
            try:
                record = os.read(self.fd, 8192).decode(errors="replace")
            except BlockingIOError:
                break
            except BrokenPipeError:
                continue  # records overwritten while we read: go on with the next
            if not record:
                break
            new += 1
            message = record.split(";", 1)[-1].splitlines()[0] if ";" in record else record
            if _ALARM.search(message):
                alarms.append(message.strip())
        os.close(self.fd)
        return {"checked": True, "new_lines": new, "alarms": len(alarms), "lines": alarms[:20]}


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    array = np.array(values)
    return {
        "p50": float(np.percentile(array, 50)),
        "p90": float(np.percentile(array, 90)),
        "p99": float(np.percentile(array, 99)),
        "max": float(array.max()),
    }


def _touch(path: Path, files: int, size: int, writable: bool) -> None:
    """The automounter case: someone uses the fs between mount and unmount."""
    payload = os.urandom(size)
    if writable:
        for number in range(files):
            target = path / f"churn-{number}"
            target.write_bytes(payload)
            if target.read_bytes() != payload:
                raise OSError(f"{target}: read back differs from what was written")
    else:
        for entry in list(path.iterdir())[:files]:
            if entry.is_file():
                entry.read_bytes()


def _remove_new_dirs(directory: Path, before: set[str]) -> None:
    for name in set(os.listdir(directory)) - before:
        path = directory / name
        if path.is_dir() and not mounts.is_mount_point(path):
            with contextlib.suppress(OSError):
                path.rmdir()


@dataclass
class Tally:
    """What the cycles measured so far."""

    mount_s: list[float] = field(default_factory=list)
    unmount_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failures: int = 0

    def fail(self, text: str) -> None:
        self.failures += 1
        self.errors.append(text)


def _cycle(
    number: int, layer: Any, ctx: BuildContext, below: Exposed, spec: dict[str, Any], tally: Tally
) -> None:
    """One mount and unmount through the layer's own expose(), files used in between."""
    began = time.monotonic()
    manager = layer.expose(ctx, below)
    try:
        exposed = manager.__enter__()
    except Exception as exc:
        tally.fail(f"cycle {number} mount: {exc}")
        return
    tally.mount_s.append(time.monotonic() - began)
    failpoints.reached("churn-mounted")
    try:
        if spec["files"]:
            # A read-only layer (readonly = true, or a squashfs/erofs image) is read instead.
            writable = not layer.options.readonly and os.access(exposed.path, os.W_OK)
            _touch(exposed.path, spec["files"], spec["file_size"], writable)
    except OSError as exc:
        tally.fail(f"cycle {number} files: {exc}")
    began = time.monotonic()
    try:
        manager.__exit__(None, None, None)
        tally.unmount_s.append(time.monotonic() - began)
    except Exception as exc:
        tally.fail(f"cycle {number} unmount: {exc}")


def _running(cycle: int, spec: dict[str, Any], deadline: float | None) -> bool:
    return (spec["cycles"] is None or cycle < spec["cycles"]) and (
        deadline is None or time.monotonic() < deadline
    )


def _through_expose(
    spec: dict[str, Any],
    kind: Any,
    options: Any,
    ctx: BuildContext,
    below: Exposed,
    tally: Tally,
    deadline: float | None,
) -> int:
    """Cycles of the layer's own expose() and teardown; returns how many ran."""
    workdir, cycle = ctx.workdir, 0
    while _running(cycle, spec, deadline):
        work_before, below_before = set(os.listdir(workdir)), set(os.listdir(below.path))
        _cycle(cycle + 1, kind(options, spec["first_index"] + cycle), ctx, below, spec, tally)
        cycle += 1
        _remove_new_dirs(workdir, work_before)
        _remove_new_dirs(below.path, below_before)
    return cycle


def _through_automount(spec: dict[str, Any], tally: Tally, deadline: float | None) -> int:
    """Rounds through the trial's automount daemon, each mounting and expiring every entry;
    returns the cycles (one mount and unmount of one entry each)."""
    workdir, cycle = Path(spec["workdir"]), 0
    names = _automount.keys(spec["entries"])

    def use(path: Path) -> None:
        if spec["files"]:
            _touch(path, spec["files"], spec["file_size"], os.access(path, os.W_OK))

    try:
        with _automount.automounter(workdir, spec["entries"], spec["entry"], Path(spec["top"])) as (
            auto,
            pid,
        ):
            while _running(cycle, spec, deadline):
                mounted, failed, expiry_s = _automount.round_of(auto, names, pid, use)
                tally.mount_s += mounted
                tally.unmount_s += [expiry_s / len(names)] * len(mounted)
                for text in failed:
                    tally.fail(f"cycle {cycle + 1} mount {text}")
                cycle += len(names)
    except (OSError, SetupError) as exc:
        tally.fail(f"automount: {exc}")
    tally.errors[:0] = _automount.daemon_errors(workdir)[:10]  # the daemon's reasons first
    return cycle


def _slab_kib() -> int:
    """The kernel's unreclaimable slab memory now (kB, /proc/meminfo SUnreclaim): its growth
    per 1,000 cycles is what a leak in mounting and unmounting shows as (the reclaimable
    part grows with the dentry and inode caches, which is no leak)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("SUnreclaim:"):
            return int(line.split()[1])
    return 0


def churn(spec: dict[str, Any]) -> dict[str, Any]:
    load_kinds()
    scratch = Scratch(Path(spec["scratch"]))
    # Journal ids of our own, far above the parent's, so the two never reuse one.
    scratch.journal.use_ids_from(10**12 + os.getpid() * 10**8)
    options = LAYER_KINDS[spec["layer"]["kind"]].Options(**spec["layer"])
    kind = LAYER_KINDS[options.kind]
    below = Exposed(
        path=Path(spec["below"]["path"]),
        fs_size=spec["below"]["fs_size"],
        standalone=spec["below"]["standalone"],
    )
    workdir = Path(spec["workdir"])
    ctx = BuildContext(scratch=scratch, workdir=workdir)
    mounts_before = len(mounts.mounts_under(scratch.root))
    loops_before = len(scratch.loop_devices())
    log = KernelLog()
    tally = Tally()
    slab_before = _slab_kib()
    start = time.monotonic()
    deadline = start + spec["duration"] if spec["duration"] else None
    if spec.get("through") == "automount":
        cycle = _through_automount(spec, tally, deadline)
    else:
        cycle = _through_expose(spec, kind, options, ctx, below, tally, deadline)
    elapsed = time.monotonic() - start
    # Loop devices detach themselves after the last unmount, not always at once.
    settle = time.monotonic() + 2
    while len(scratch.loop_devices()) > loops_before and time.monotonic() < settle:
        time.sleep(0.05)
    return {
        "cycles": cycle,
        "seconds": elapsed,
        "cycles_per_s": cycle / elapsed if elapsed > 0 else 0.0,
        "mount_s": _percentiles(tally.mount_s),
        "unmount_s": _percentiles(tally.unmount_s),
        "failures": tally.failures,
        "errors": tally.errors[:20],
        "leaked_mounts": max(len(mounts.mounts_under(scratch.root)) - mounts_before, 0),
        "leaked_loops": max(len(scratch.loop_devices()) - loops_before, 0),
        "kernel_log": log.read_new(),
        "through": spec.get("through", "expose"),
        "slab_kib_growth": (grown := _slab_kib() - slab_before),
        "slab_kib_per_1000_cycles": grown * 1000 / cycle if cycle else None,
    }


def main(spec_path: Path) -> int:
    spec = json.loads(spec_path.read_text())
    result = churn(spec)
    part = Path(spec["result"] + ".part")
    part.write_text(json.dumps(result))
    os.replace(part, spec["result"])
    return 1 if result["failures"] or result["leaked_mounts"] or result["leaked_loops"] else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
