#!/usr/bin/env python3
"""layerbench against the plain tools, side by side in one run.

    python3 bench/run.py [--quick | --tiny] [--device memory|disk] [--overhead | --only ROWS] [--scratch DIR]

Prints, as a Markdown table:
- per-run overhead: the wall time layerbench records for a `command` workload of `true`
  and of `sleep 1`, against the same commands spawned and waited for bare, each after
  the caches were dropped as layerbench drops them (the warm-cache figure is shown too);
- stream-write against `dd conv=fsync` and against `fio` writing the same way (zeros into a
  fresh file, no preallocation, end_fsync) on the same file system, in shuffled rounds
  after a warm-up round, caches dropped before each (and, where the kernel hands free memory
  back to its hypervisor, the run's memory held until it starts, as layerbench holds it);
- the `fio` workload against the same job run by hand with fio on an identical fresh ext4
  image (4 KiB random reads at queue depth 32, 1 MiB sequential writes): IOPS and p99;
- extract against plain `tar -xf` (+ `sync -f`) of the same archive, staged on a tmpfs,
  into the same file system;
- the default experiment's total time (`--quick`: the `--quick` experiment) and the peak
  memory (VmHWM) of the layerbench process running it.
Ratios are two-sided: layerbench's figure over the plain tool's, like for like (speed over
speed, latency over latency), with the interval of the project's own paired comparison
(layerbench/stats/methods.py) over the rounds; a row is met when that interval lies within
3 % of 1 either way, missed when it lies outside. A row still undecided (its interval
straddles the band's edge) gets more rounds, up to 4 looks, with alpha spent over the looks
as an experiment's time budget spends it (0.05 / 4 at each: every level printed holds
however many looks a row took).
The like-for-like rows ask whether layerbench measures what the plain tool measures, so by
default they run on a device no other program shares (`--device memory`): ext4 on a loop
device whose image lies in a tmpfs, in a private mount namespace that the kernel takes down
with the process, however it ends. A shared virtio disk's speed moves by up to 3x from one
round to the next on both sides alike, which no number of rounds narrows to +-3 %;
`--device disk` runs them on the scratch root's own disk all the same. The overhead rows and
the default experiment run on the disk either way.
Needs root (mounts, drop_caches), fio and tar.
"""

import argparse
import contextlib
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from layerbench.content.archives import builtin_archive  # noqa: E402
from layerbench.core.errors import UserError  # noqa: E402
from layerbench.core.runs import RunRecord  # noqa: E402
from layerbench.core.sizes import format_size, parse_size  # noqa: E402
from layerbench.linux import mounts, namespace, system  # noqa: E402
from layerbench.observe import host, measure, warm_memory  # noqa: E402
from layerbench.reports.base import ReportData  # noqa: E402
from layerbench.session import Session  # noqa: E402
from layerbench.stacks import image as image_layer  # noqa: E402
from layerbench.stats import methods  # noqa: E402
from layerbench.workloads import fio as fio_kind  # noqa: E402

MODES = {
    # overhead reps, write size, write rounds, extract archive, extract rounds, experiment
    "full": (20, "1G", 7, "source-tree", 7, []),
    "quick": (10, "512M", 5, "source-tree", 5, ["--quick"]),
    "tiny": (3, "16M", 2, "small-tree", 2, ["tiny"]),
}
# mode: the size of the memory device's file system (the fio image, 2 x the write size + 64M,
# and one contender's files at a time, each removed before the next)
MEMORY_DEVICE = {"full": "4G", "quick": "3G", "tiny": "512M"}
# mode: the looks a like-for-like row may take (each adds the mode's rounds again)
LOOKS = {"full": 4, "quick": 4, "tiny": 1}
# mode: whether both sides of a like-for-like row wait for free page reporting's pass before
# each run (let_go): not in the suite's smoke test, where the waits (up to 2.1 s each) would
# be most of its time
WAIT_PASS = {"full": True, "quick": True, "tiny": False}
OVERHEAD_GOAL_S = 0.002  # a run within 2 ms of the bare command (issue 25), its interval too
OVERHEAD_GOAL_SHARE = 0.01
RATIO_BAND = 0.03  # like for like: within 3 % of 1, either way
ALPHA = 0.05  # the chance that a row's verdict is wrong, over all the looks at it

TINY_PLAN = """
name = "bench-tiny"
reps = 2
warmup = 0
[stacks.disk]
layers = []
[stacks.ram]
layers = [{ kind = "tmpfs", size = "64M" }]
[workloads.write]
kind = "stream-write"
size = "8M"
"""


def bare(argv: list[str]) -> float:
    """Wall time of argv spawned and waited for with nothing else around it. The program is
    looked up on the PATH first, untimed, as layerbench does before its clock starts (after
    dropped caches the lookup reads the PATH's directories from the disk again: milliseconds
    that belong to neither side)."""
    program = shutil.which(argv[0]) or argv[0]
    start = time.monotonic()
    pid = os.posix_spawn(program, argv, os.environ)
    os.waitpid(pid, 0)
    return time.monotonic() - start


def plan(name: str, reps: int, warmup: int, stacks: str, workloads: str, *, wait_pass: bool = False) -> str:
    """wait_pass: the trial waits for the pass of free page reporting already due before its
    run, as the plain tool's side does (let_go)."""
    head = (
        f'name = "{name}"\nreps = {reps}\nwarmup = {warmup}\nwait_reporting_pass = {str(wait_pass).lower()}\n'
    )
    return f"{head}{stacks}\n{workloads}\n"


DISK = "[stacks.disk]\nlayers = []\n"


def measured_runs(data: ReportData) -> dict[str, list[RunRecord]]:
    found: dict[str, list[RunRecord]] = {}
    for run in data.runs:
        if run.measured:
            found.setdefault(run.workload, []).append(run)
        elif run.status != "ok":
            raise SystemExit(f"bench: a layerbench run failed: {run.error}")
    return found


def overhead(session: Session, reps: int) -> list[list[str]]:
    workloads = '[workloads.true]\nkind = "command"\nrun = "true"\n'
    workloads += '[workloads.sleep]\nkind = "command"\nrun = "sleep 1"\n'
    started = time.monotonic()
    data = session.run_plan(plan("bench-overhead", reps, 1, DISK, workloads))
    per_trial = (time.monotonic() - started) / len(data.runs)
    runs = measured_runs(data)
    rows = []
    for name, argv, goal_share in (("true", ["true"], None), ("sleep", ["sleep", "1"], OVERHEAD_GOAL_SHARE)):
        # Like every layerbench run, each bare one starts with the caches dropped: the
        # command's binary and libraries are read from the disk again each time.
        bare(argv)
        cold = []
        for _ in range(reps):
            measure.drop_caches()
            cold.append(bare(argv))
        plain = median(cold)
        warm = median(bare(argv) for _ in range(reps))
        walls = [r.wall_s for r in runs[name]]
        ours = median(walls)
        extra = ours - plain
        spread = scipy_stats.bootstrap(
            (np.asarray(walls), np.asarray(cold)),
            lambda a, b, axis: np.median(a, axis=axis) - np.median(b, axis=axis),
            vectorized=True,
            n_resamples=4000,
            method="percentile",
            random_state=np.random.default_rng(5),
        ).confidence_interval
        # Met when the whole interval lies within the goal, missed when it lies beyond it.
        limit = min(OVERHEAD_GOAL_S, goal_share * plain) if goal_share else OVERHEAD_GOAL_S
        met = "yes" if spread.high <= limit else "NO" if spread.low > limit else "undecided"
        goal = f"<= {OVERHEAD_GOAL_S * 1000:.0f} ms" + (f", <= {goal_share:.0%}" if goal_share else "")
        rows.append(
            [
                f"per-run overhead, `{' '.join(argv)}`",
                f"{ours * 1000:.2f} ms",
                f"{plain * 1000:.2f} ms (caches warm: {warm * 1000:.2f} ms)",
                f"{extra * 1000:+.2f} ms [{spread.low * 1000:+.2f} to {spread.high * 1000:+.2f}] "
                f"({extra / plain:+.2%})",
                goal,
                met,
            ]
        )
    rows.append(
        [
            "whole trial (build, prepare, drop caches, run, store, tear down)",
            f"{per_trial * 1000:.0f} ms",
            "-",
            "-",
            "(information)",
            "-",
        ]
    )
    return rows


def held_warm(run: int | str) -> contextlib.AbstractContextManager[warm_memory.Held]:
    """Like for like: a plain tool's run gets the memory a layerbench trial holds for its run
    (warm_memory.py), where this kernel hands free memory back, released right before it."""
    run_bytes = parse_size(run) if isinstance(run, str) else run
    return warm_memory.held(run_bytes if warm_memory.wanted() else 0)


def let_go(warm: warm_memory.Held, wait_pass: bool) -> None:
    """Right before a plain tool's run, as a trial lets go: with wait_pass, after the pass of
    free page reporting already due (warm_memory.wait_for_reporting_pass)."""
    if wait_pass:
        warm_memory.wait_for_reporting_pass(warm)
    warm.release()


@dataclass
class Row:
    """A like-for-like row: one figure of the ours contender's results over the plain one's."""

    what: str
    ours: str
    plain: str
    unit: str
    pick: Callable[[Any], float] = float
    digits: int = 1
    cells: list[str] | None = None  # set by the look that closed the row


def sequential(
    rounds: int, looks: int, contenders: dict[str, Callable[[], Any]], rows: list[Row]
) -> list[list[str]]:
    """A warm-up round (discarded), then rounds in shuffled order (drift hits all alike), then
    a look: a row whose interval decides it is closed there, as that look drew it; the
    contenders of the rows still open get `rounds` more rounds, up to `looks` looks. Each
    look spends ALPHA / looks (Bonferroni over the looks), so a row's stated level holds
    however many looks it took; a row open at the last look stays undecided."""
    results: dict[str, list[Any]] = {name: [] for name in contenders}
    rng = random.Random(7)
    for name in rng.sample(list(contenders), len(contenders)):
        contenders[name]()
    for look in range(1, looks + 1):
        # A contender stops only once every row it is in has closed: the open rows' pairs
        # (one result of each side per round) stay aligned.
        wanted = sorted({name for row in rows if row.cells is None for name in (row.ours, row.plain)})
        for _ in range(rounds):
            for name in rng.sample(wanted, len(wanted)):
                results[name].append(contenders[name]())
        for row in rows:
            if row.cells is None:
                ours = [row.pick(value) for value in results[row.ours]]
                plain = [row.pick(value) for value in results[row.plain]]
                cells = ratio_row(row, ours, plain, ALPHA / looks)
                if cells[-1] != "undecided" or look == looks:
                    row.cells = cells
        if all(row.cells is not None for row in rows):
            break
    return [row.cells for row in rows if row.cells is not None]


def ratio_interval(ours: list[float], plain: list[float], alpha: float) -> tuple[float, float, float, float]:
    """The ratio of ours to plain over paired rounds, its interval at level 1 - alpha and
    that level, by the method an experiment's comparison uses (nan where there is none)."""
    found = methods.fit(np.asarray(ours), np.asarray(plain), paired=True, strictest_alpha=alpha)
    if found is None or len(ours) < 3:
        return median(ours) / median(plain), math.nan, math.nan, math.nan
    low, high, level = found.interval(alpha)
    return math.exp(found.estimate), math.exp(low), math.exp(high), level


def verdict(ratio: float, low: float, high: float) -> str:
    """met: the interval lies within 1 +- RATIO_BAND; NO: it lies outside; undecided: it
    straddles the band's edge (more rounds, or a quieter machine, would decide)."""
    lowest, highest = 1 - RATIO_BAND, 1 + RATIO_BAND
    if math.isnan(low):  # too few rounds for an interval: the point estimate only
        return "yes (no interval)" if lowest <= ratio <= highest else "NO (no interval)"
    if lowest <= low and high <= highest:
        return "yes"
    if high < lowest or low > highest:
        return "NO"
    return "undecided"


def ratio_row(row: Row, ours: list[float], plain: list[float], alpha: float) -> list[str]:
    """The row's cells: each side's median and range, the ratio with its interval, level
    and rounds, and whether its interval lies within RATIO_BAND of 1."""
    ratio, low, high, level = ratio_interval(ours, plain, alpha)
    interval = f" [{low:.3f}-{high:.3f}, {level:.2%}]" if not math.isnan(low) else ""
    digits, unit = row.digits, row.unit
    return [
        row.what,
        f"{median(ours):.{digits}f} {unit} ({min(ours):.{digits}f}-{max(ours):.{digits}f})",
        f"{median(plain):.{digits}f} {unit} ({min(plain):.{digits}f}-{max(plain):.{digits}f})",
        f"{ratio:.3f}{interval}, {len(ours)} rounds",
        f"1 ± {RATIO_BAND:.0%}",
        verdict(ratio, low, high),
    ]


def stream_write(session: Session, size: str, rounds: int, looks: int, wait_pass: bool) -> list[list[str]]:
    size_bytes = parse_size(size)
    count = size_bytes // 2**20
    workload = f'[workloads.write]\nkind = "stream-write"\nsize = "{size}"\n'
    serial = iter(range(10**6))

    def layerbench() -> float:
        data = session.run_plan(plan("bench-stream-write", 1, 0, DISK, workload, wait_pass=wait_pass))
        return measured_runs(data)["write"][0].required("throughput") / 1e6

    def dd() -> float:
        with session.scratch.directory("bench", f"dd-{next(serial)}") as target, held_warm(size) as warm:
            measure.drop_caches()
            let_go(warm, wait_pass)
            argv = ["dd", "if=/dev/zero", f"of={target}/stream.dat", "bs=1M", f"count={count}"]
            seconds = bare([*argv, "conv=fsync", "status=none"])
        return size_bytes / seconds / 1e6

    def fio() -> float:
        with session.scratch.directory("bench", f"fio-{next(serial)}") as target, held_warm(size) as warm:
            measure.drop_caches()
            let_go(warm, wait_pass)
            done = subprocess.run(
                # As dd writes: zeros, into a fresh file, no preallocation, one fsync at the end.
                ["fio", "--name=write", f"--filename={target}/stream.dat", "--rw=write", "--bs=1M",
                 f"--size={size_bytes}", "--ioengine=psync", "--end_fsync=1", "--fallocate=none",
                 "--zero_buffers", "--output-format=json"],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
        text = done.stdout
        report = json.loads(text[text.index("{") : text.rindex("}") + 1])
        return float(report["jobs"][0]["write"]["bw_bytes"]) / 1e6

    what = f"stream-write {format_size(size_bytes)}, fsync'd (MB/s)"
    rows = [
        Row(f"{what} vs `dd conv=fsync`", "layerbench", "dd", "MB/s"),
        Row(f"{what} vs `fio` end_fsync", "layerbench", "fio", "MB/s"),
    ]
    return sequential(rounds, looks, {"layerbench": layerbench, "dd": dd, "fio": fio}, rows)


FIO_JOBS = {
    # label: (direction, job); the same text runs in layerbench and by hand
    "randread 4 KiB QD32": ("read", "[job]\nrw=randread\nbs=4k\niodepth=32\nioengine=libaio\ndirect=1\n"),
    "seq write 1 MiB": ("write", "[job]\nrw=write\nbs=1M\nioengine=psync\nend_fsync=1\n"),
}


def fio_workload(session: Session, size: str, rounds: int, looks: int, wait_pass: bool) -> list[list[str]]:
    """The fio workload against the same job by hand, each on a fresh ext4 image of one size."""
    size_bytes = parse_size(size)
    image = 2 * size_bytes + (64 << 20)
    serial = iter(range(10**6))
    scratch = session.scratch
    rows = []
    with tempfile.TemporaryDirectory(prefix="layerbench-bench-") as directory:
        for label, (direction, text) in FIO_JOBS.items():
            job = Path(directory) / f"{direction}.fio"
            job.write_text(text + f"size={size_bytes}\n")
            stack = f'[stacks.image]\nlayers = [{{ kind = "image", fs = "ext4", size = "{image}" }}]\n'
            workload = f'[workloads.fio]\nkind = "fio"\njob = "{job}"\n'

            def layerbench(
                workload: str = workload, stack: str = stack, direction: str = direction
            ) -> tuple[float, float]:
                data = session.run_plan(plan("bench-fio", 1, 0, stack, workload, wait_pass=wait_pass))
                run = measured_runs(data)["fio"][0]
                return run.required(f"{direction}_iops"), run.required(f"{direction}_clat_p99_ns")

            def by_hand(job: Path = job, direction: str = direction) -> tuple[float, float]:
                with (
                    scratch.directory("bench", f"fio-image-{next(serial)}") as work,
                    held_warm(size_bytes) as warm,
                ):
                    backing = work / "fs.img"
                    # As the image layer makes it: inode tables and journal written now, not
                    # by the kernel's lazy-init thread during the timed job.
                    image_layer.make_image(backing, image, preallocate=False)
                    mkfs = ["mkfs.ext4", *image_layer.MKFS_ARGUMENTS["ext4"], str(backing)]
                    subprocess.run(mkfs, check=True)
                    top = work / "top"
                    top.mkdir()
                    with scratch.mounted(str(backing), top, fstype="ext4", options=["loop"]):
                        common = ["fio", f"--directory={top}"]
                        subprocess.run(
                            [*common, "--create_only=1", str(job)], check=True, capture_output=True
                        )
                        subprocess.run(["sync", "-f", str(top)], check=True)
                        measure.drop_caches()
                        let_go(warm, wait_pass)
                        done = subprocess.run(
                            [*common, "--output-format=json+", str(job)],
                            check=True,
                            capture_output=True,
                            text=True,
                        )
                found, _ = fio_kind.figures_of(json.loads(done.stdout[done.stdout.index("{") :]))
                return found[f"{direction}_iops"], found[f"{direction}_clat_p99_ns"]

            what = f"fio workload, {label}, {format_size(size_bytes)} on an ext4 image, vs the job by hand"
            pair = [
                Row(f"{what}: IOPS", "layerbench", "fio", "IOPS", pick=lambda found: found[0], digits=0),
                Row(f"{what}: p99 latency", "layerbench", "fio", "µs", pick=lambda found: found[1] / 1000),
            ]
            rows += sequential(rounds, looks, {"layerbench": layerbench, "fio": by_hand}, pair)
    return rows


def extract(session: Session, archive_name: str, rounds: int, looks: int, wait_pass: bool) -> list[list[str]]:
    archive = builtin_archive(archive_name)
    scratch = session.scratch
    workload = f'[workloads.extract]\nkind = "extract"\narchive = "builtin:{archive_name}"\n'
    serial = iter(range(10**6))

    def layerbench() -> float:
        data = session.run_plan(plan("bench-extract", 1, 0, DISK, workload, wait_pass=wait_pass))
        return measured_runs(data)["extract"][0].wall_s

    def tar() -> float:
        with scratch.directory("bench", f"tar-{next(serial)}") as work, held_warm(archive.bytes) as warm:
            stage = work / "stage"
            stage.mkdir()
            room = f"size={archive.path.stat().st_size + 64 * 2**20}"
            with scratch.mounted("bench-stage", stage, fstype="tmpfs", options=[room]):
                staged = stage / archive.path.name
                shutil.copyfile(archive.path, staged)
                target = work / "extract"
                target.mkdir()
                measure.drop_caches()
                let_go(warm, wait_pass)
                start = time.monotonic()
                subprocess.run(["tar", "-xf", str(staged), "-C", str(target)], check=True)
                subprocess.run(["sync", "-f", str(target)], check=True)
                return time.monotonic() - start

    what = f"extract {archive_name} ({archive.files:,} files, {format_size(archive.bytes)}) vs `tar -xf`"
    row = Row(what, "layerbench", "tar", "s", digits=3)
    return sequential(rounds, looks, {"layerbench": layerbench, "tar": tar}, [row])


LIKE_FOR_LIKE = ("stream-write", "fio", "extract")


def like_for_like(session: Session, mode: str, only: str | None = None) -> list[list[str]]:
    """layerbench against dd, fio and tar (or only one of them), on the session's scratch root."""
    _, size, write_rounds, archive, extract_rounds, _ = MODES[mode]
    wait_pass = WAIT_PASS[mode]
    rows: list[list[str]] = []
    if only in (None, "stream-write"):
        rows += stream_write(session, size, write_rounds, LOOKS[mode], wait_pass)
    if only in (None, "fio"):
        rows += fio_workload(session, size, write_rounds, LOOKS[mode], wait_pass)
    if only in (None, "extract"):
        rows += extract(session, archive, extract_rounds, LOOKS[mode], wait_pass)
    return rows


def default_experiment(scratch_root: Path, how: list[str]) -> list[list[str]]:
    """The experiment as a user runs it, in its own process; its peak memory is polled."""
    with tempfile.TemporaryDirectory(prefix="layerbench-bench-") as directory:
        args = ["run", "--quiet", "--db", f"{directory}/bench.db", "--scratch", str(scratch_root / "default")]
        label = "the default experiment"
        if how == ["tiny"]:
            Path(directory, "tiny.toml").write_text(TINY_PLAN)
            args.insert(1, f"{directory}/tiny.toml")
            label = "a tiny experiment"
        elif how:
            args += how
            label += " (--quick)"
        start = time.monotonic()
        child = subprocess.Popen([sys.executable, "-m", "layerbench", *args], cwd=REPO)
        peak_kb = 0
        while child.poll() is None:
            try:
                status = Path(f"/proc/{child.pid}/status").read_text()
                peak_kb = max(peak_kb, int(status.split("VmHWM:")[1].split()[0]))
            except (OSError, IndexError):
                pass
            time.sleep(0.1)
        total = time.monotonic() - start
        if child.returncode != 0:
            raise SystemExit(f"bench: layerbench {' '.join(args)} exited {child.returncode}")
    return [
        [f"{label}: total time", f"{total:.0f} s", "-", "-", "(information)", "-"],
        [f"{label}: peak memory of the harness", f"{peak_kb / 1024:.0f} MiB", "-", "-", "(information)", "-"],
    ]


def write_every_page(image: Path, size: int) -> None:
    """The memory device's image, every page of it written now: the kernel hands free memory
    back to its hypervisor, and a page first written in a timed run can cost that run a host
    fault. 512M `dd conv=fsync` 12 times, 2 s apart, each held warm as below (2026-12-06): on
    a fallocated image 0.28-1.63 s, the slow rounds (2-6) those that first wrote a part of the
    image, 0.29-0.36 s after; on a written one 0.26-0.39 s throughout. (A sparse image, before:
    550-2000 MB/s from one round to the next, on both sides alike.)"""
    chunk = bytes(64 << 20)
    with open(image, "wb") as handle:
        for offset in range(0, size, len(chunk)):
            handle.write(chunk[: min(len(chunk), size - offset)])


@contextlib.contextmanager
def memory_device(under: Path, size: str) -> Iterator[Path]:
    """An ext4 file system on a loop device whose image lies in a tmpfs: a device no other
    program writes to, whose speed is the memory's. In a private mount namespace, so the kernel
    takes the mounts, the loop device (autoclear) and the memory down with the process if it is
    killed; only the two empty mount points may stay, and the next run reuses them."""
    with contextlib.ExitStack() as stack:
        if reason := stack.enter_context(namespace.private_mount_namespace()):
            raise UserError(f"--device memory needs a private mount namespace ({reason}); try --device disk")
        backing, top = under / "memory", under / "memory-fs"
        for directory in (backing, top):
            directory.mkdir(parents=True, exist_ok=True)
            stack.callback(directory.rmdir)
        room = parse_size(size)
        mounts.mount("tmpfs", backing, fstype="tmpfs", options=[f"size={room + (64 << 20)}"])
        stack.callback(mounts.unmount, backing)
        image = backing / "fs.img"
        write_every_page(image, room)
        # mkfs discards the whole device first, and on an image file that punches holes:
        # every page just taken would go back (nodiscard keeps them).
        system.run(["mkfs.ext4", *image_layer.ext4_mkfs_arguments("nodiscard"), str(image)])
        mounts.mount(str(image), top, fstype="ext4", options=["loop"])
        stack.callback(mounts.unmount, top)
        yield top


def main() -> int:
    parser = argparse.ArgumentParser(description="layerbench against the plain tools, side by side")
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--quick", action="store_true", help="smaller sizes, fewer rounds, the --quick experiment"
    )
    group.add_argument("--tiny", action="store_true", help="a smoke test: tiny sizes, two rounds")
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp/layerbench-bench"))
    parser.add_argument(
        "--device",
        choices=["memory", "disk"],
        default="memory",
        help="where the like-for-like rows run: ext4 on a memory-backed loop device (default), "
        "or the scratch root's disk",
    )
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--overhead", action="store_true", help="only the per-run overhead rows (about a minute)"
    )
    only.add_argument(
        "--only",
        choices=LIKE_FOR_LIKE,
        help="only this kind of like-for-like rows (no overhead rows, no default experiment)",
    )
    args = parser.parse_args()
    for tool in ("fio", "tar", "dd"):
        if shutil.which(tool) is None:
            print(f"bench: {tool} is missing (apt-get install {tool if tool != 'dd' else 'coreutils'})")
            return 2
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    reps, experiment = MODES[mode][0], MODES[mode][-1]
    started = time.monotonic()
    rows: list[list[str]] = []
    try:
        # The layerbench runs' results go to a store that is removed with the session.
        with Session(args.scratch / "runs", "bench/run.py") as session:
            machine = host.describe(session.scratch.root)
            if not args.only:
                rows += overhead(session, reps)
            if args.device == "disk" and not args.overhead:
                rows += like_for_like(session, mode, args.only)
        if args.device == "memory" and not args.overhead:
            with (
                memory_device(args.scratch, MEMORY_DEVICE[mode]) as device,
                Session(device / "runs", "bench/run.py") as session,
            ):
                rows += like_for_like(session, mode, args.only)
    except UserError as exc:  # not root, the scratch root in use, leftovers that stay
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    if not args.overhead and not args.only:
        rows += default_experiment(args.scratch, experiment)
    for root in (args.scratch / "runs", args.scratch / "default"):
        # Each is a scratch root of its own; what is left is its marker, lock and no journal.
        if root.exists() and not (root / "journal.jsonl").exists():
            shutil.rmtree(root)
    with contextlib.suppress(OSError):
        args.scratch.rmdir()
    disks = ", ".join(f"{d['name']} ({d['model']}, {d['scheduler']})" for d in machine.get("disks", []))
    took = time.monotonic() - started
    where = "ext4 on a memory-backed loop device" if args.device == "memory" else "the disk"
    print(
        f"layerbench bench ({mode}), {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {took:.0f} s; "
        f"{machine['cpu_model']} x{machine['cpus']}, {format_size(machine['memory_bytes'])}, "
        f"{platform.release()}, {disks}, scratch on {machine['scratch_fs']['type']}; "
        f"like for like on {where}"
    )
    print()
    header = ["check", "layerbench", "plain tool", "ratio", "goal", "met"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
