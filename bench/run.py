#!/usr/bin/env python3
"""layerbench against the plain tools, side by side in one run.

    python3 bench/run.py [--quick | --tiny] [--scratch /var/tmp/layerbench-bench]

Prints, as a Markdown table:
- per-run overhead: the wall time layerbench records for a `command` workload of `true`
  and of `sleep 1`, against the same commands spawned and waited for bare, each after
  the caches were dropped as layerbench drops them (the warm-cache figure is shown too);
- stream-write against `dd conv=fsync` and against `fio` (end_fsync) on the same file
  system, in shuffled rounds after a warm-up round, caches dropped before each;
- extract against plain `tar -xf` (+ `sync -f`) of the same archive, staged on a tmpfs,
  into the same file system;
- the default experiment's total time (`--quick`: the `--quick` experiment) and the peak
  memory (VmHWM) of the layerbench process running it.
Ratios are layerbench's speed over the plain tool's (1.0 = as fast; goal >= 0.97).
Needs root (mounts, drop_caches), fio and tar.
"""

import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from layerbench import host, measure, namespace  # noqa: E402
from layerbench.archives import builtin_archive  # noqa: E402
from layerbench.scratch import Scratch  # noqa: E402
from layerbench.sizes import format_size, parse_size  # noqa: E402
from layerbench.store import Store  # noqa: E402
from layerbench.validity import run_plan  # noqa: E402

MODES = {
    # overhead reps, write size, write rounds, extract archive, extract rounds, experiment
    "full": (20, "1G", 7, "source-tree", 7, []),
    "quick": (10, "512M", 5, "source-tree", 5, ["--quick"]),
    "tiny": (3, "16M", 2, "small-tree", 2, ["tiny"]),
}
OVERHEAD_GOAL_S = 0.005
OVERHEAD_GOAL_SHARE = 0.01
RATIO_GOAL = 0.97

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
    """Wall time of argv spawned and waited for with nothing else around it; found on the
    PATH as a shell would (and as layerbench does), which after dropped caches reads the
    PATH's directories from the disk again."""
    start = time.monotonic()
    pid = os.posix_spawnp(argv[0], argv, os.environ)
    os.waitpid(pid, 0)
    return time.monotonic() - start


def plan(name: str, reps: int, warmup: int, stacks: str, workloads: str) -> str:
    return f'name = "{name}"\nreps = {reps}\nwarmup = {warmup}\n{stacks}\n{workloads}\n'


DISK = "[stacks.disk]\nlayers = []\n"


def measured_runs(data: object) -> dict[str, list[dict[str, object]]]:
    found: dict[str, list[dict[str, object]]] = {}
    for run in data.runs:  # type: ignore[attr-defined]
        if run["status"] == "ok" and not run["warmup"]:
            found.setdefault(run["workload"], []).append(run)
        elif run["status"] != "ok":
            raise SystemExit(f"bench: a layerbench run failed: {run['error']}")
    return found


def overhead(scratch: Scratch, store: Store, reps: int) -> list[list[str]]:
    workloads = '[workloads.true]\nkind = "command"\nrun = "true"\n'
    workloads += '[workloads.sleep]\nkind = "command"\nrun = "sleep 1"\n'
    started = time.monotonic()
    data = run_plan(plan("bench-overhead", reps, 1, DISK, workloads), scratch, store)
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
        ours = median(float(r["wall_s"]) for r in runs[name])  # type: ignore[arg-type]
        extra = ours - plain
        met = extra <= OVERHEAD_GOAL_S and (goal_share is None or extra / plain <= goal_share)
        goal = f"<= {OVERHEAD_GOAL_S * 1000:.0f} ms" + (f", <= {goal_share:.0%}" if goal_share else "")
        rows.append(
            [
                f"per-run overhead, `{' '.join(argv)}`",
                f"{ours * 1000:.2f} ms",
                f"{plain * 1000:.2f} ms (caches warm: {warm * 1000:.2f} ms)",
                f"{extra * 1000:+.2f} ms ({extra / plain:+.2%})",
                goal,
                "yes" if met else "NO",
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


def _rounds(rounds: int, contenders: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """A warm-up round (discarded), then rounds in shuffled order: drift hits all alike."""
    results: dict[str, list[float]] = {name: [] for name in contenders}
    rng = random.Random(7)
    for index in range(rounds + 1):
        for name in rng.sample(list(contenders), len(contenders)):
            value = contenders[name]()
            if index:
                results[name].append(value)
    return results


def ratio_row(
    what: str, ours: list[float], plain: list[float], unit: str, *, digits: int = 1, durations: bool = False
) -> list[str]:
    """durations: the figures are times, so the ratio is plain over ours (above 1: we are faster)."""
    ratio = median(plain) / median(ours) if durations else median(ours) / median(plain)
    return [
        what,
        f"{median(ours):.{digits}f} {unit}",
        f"{median(plain):.{digits}f} {unit}",
        f"{ratio:.3f}",
        f">= {RATIO_GOAL}",
        "yes" if ratio >= RATIO_GOAL else "NO",
    ]


def stream_write(scratch: Scratch, store: Store, size: str, rounds: int) -> list[list[str]]:
    size_bytes = parse_size(size)
    count = size_bytes // 2**20
    workload = f'[workloads.write]\nkind = "stream-write"\nsize = "{size}"\n'
    serial = iter(range(10**6))

    def layerbench() -> float:
        data = run_plan(plan("bench-stream-write", 1, 0, DISK, workload), scratch, store)
        return float(measured_runs(data)["write"][0]["throughput"]) / 1e6  # type: ignore[arg-type]

    def dd() -> float:
        with scratch.directory("bench", f"dd-{next(serial)}") as target:
            measure.drop_caches()
            argv = ["dd", "if=/dev/zero", f"of={target}/stream.dat", "bs=1M", f"count={count}"]
            seconds = bare([*argv, "conv=fsync", "status=none"])
        return size_bytes / seconds / 1e6

    def fio() -> float:
        with scratch.directory("bench", f"fio-{next(serial)}") as target:
            measure.drop_caches()
            done = subprocess.run(
                ["fio", "--name=write", f"--filename={target}/stream.dat", "--rw=write", "--bs=1M",
                 f"--size={size_bytes}", "--ioengine=psync", "--end_fsync=1", "--output-format=json"],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
        text = done.stdout
        report = json.loads(text[text.index("{") : text.rindex("}") + 1])
        return float(report["jobs"][0]["write"]["bw_bytes"]) / 1e6

    results = _rounds(rounds, {"layerbench": layerbench, "dd": dd, "fio": fio})
    what = f"stream-write {format_size(size_bytes)}, fsync'd (MB/s)"
    return [
        ratio_row(f"{what} vs `dd conv=fsync`", results["layerbench"], results["dd"], "MB/s"),
        ratio_row(f"{what} vs `fio` end_fsync", results["layerbench"], results["fio"], "MB/s"),
    ]


def extract(scratch: Scratch, store: Store, archive_name: str, rounds: int) -> list[list[str]]:
    archive = builtin_archive(archive_name)
    workload = f'[workloads.extract]\nkind = "extract"\narchive = "builtin:{archive_name}"\n'
    serial = iter(range(10**6))

    def layerbench() -> float:
        data = run_plan(plan("bench-extract", 1, 0, DISK, workload), scratch, store)
        return float(measured_runs(data)["extract"][0]["wall_s"])  # type: ignore[arg-type]

    def tar() -> float:
        with scratch.directory("bench", f"tar-{next(serial)}") as work:
            stage = work / "stage"
            stage.mkdir()
            room = f"size={archive.path.stat().st_size + 64 * 2**20}"
            with scratch.mounted("bench-stage", stage, fstype="tmpfs", options=[room]):
                staged = stage / archive.path.name
                shutil.copyfile(archive.path, staged)
                target = work / "extract"
                target.mkdir()
                measure.drop_caches()
                start = time.monotonic()
                subprocess.run(["tar", "-xf", str(staged), "-C", str(target)], check=True)
                subprocess.run(["sync", "-f", str(target)], check=True)
                return time.monotonic() - start

    results = _rounds(rounds, {"layerbench": layerbench, "tar": tar})
    what = f"extract {archive_name} ({archive.files:,} files, {format_size(archive.bytes)}) vs `tar -xf`"
    return [ratio_row(what, results["layerbench"], results["tar"], "s", digits=3, durations=True)]


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


def main() -> int:
    parser = argparse.ArgumentParser(description="layerbench against the plain tools, side by side")
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--quick", action="store_true", help="smaller sizes, fewer rounds, the --quick experiment"
    )
    group.add_argument("--tiny", action="store_true", help="a smoke test: tiny sizes, two rounds")
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp/layerbench-bench"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench: needs root (mounts, drop_caches)", file=sys.stderr)
        return 2
    for tool in ("fio", "tar", "dd"):
        if shutil.which(tool) is None:
            print(f"bench: {tool} is missing (apt-get install {tool if tool != 'dd' else 'coreutils'})")
            return 2
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    reps, size, write_rounds, archive, extract_rounds, experiment = MODES[mode]
    started = time.monotonic()
    namespace.enter_private_mount_namespace()
    scratch = Scratch(args.scratch / "runs")
    machine = host.describe(scratch.root)
    scratch.lock("bench/run.py")
    rows: list[list[str]] = []
    try:
        scratch.clean()
        with tempfile.TemporaryDirectory(prefix="layerbench-bench-") as directory:
            store = Store(Path(directory) / "bench.db")
            rows += overhead(scratch, store, reps)
            rows += stream_write(scratch, store, size, write_rounds)
            rows += extract(scratch, store, archive, extract_rounds)
            store.close()
    finally:
        scratch.tidy()
        scratch.unlock()
    rows += default_experiment(args.scratch, experiment)
    for root in (args.scratch / "runs", args.scratch / "default"):
        # Each is a scratch root of its own; what is left is its marker, lock and no journal.
        if root.exists() and not (root / "journal.jsonl").exists():
            shutil.rmtree(root)
    with contextlib.suppress(OSError):
        args.scratch.rmdir()
    disks = ", ".join(f"{d['name']} ({d['model']}, {d['scheduler']})" for d in machine.get("disks", []))
    took = time.monotonic() - started
    print(
        f"layerbench bench ({mode}), {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {took:.0f} s; "
        f"{machine['cpu_model']} x{machine['cpus']}, {format_size(machine['memory_bytes'])}, "
        f"{platform.release()}, {disks}, scratch on {machine['scratch_fs']['type']}"
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
