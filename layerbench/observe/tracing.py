"""Optional deep tracing: `trace = "block"` on a workload records, during each timed run, a
histogram of block-request latency (issue to completion) per device, from the kernel's
`block:block_rq_issue` and `block:block_rq_complete` tracepoints through bpftrace.

It needs bpftrace, the kernel's BTF and tracefs. tracefs is mounted by layerbench only inside
its own mount namespace (where the mount is private and vanishes with the run); with
--no-namespace it must already be mounted at /sys/kernel/tracing. Where any of it is
missing the runs go on untraced and the report says why in one line. The tracer is a helper
process of the trial (journaled, stopped on every way out); it is attached before the timed
run starts and its maps are read after the run ends, so neither step is timed, but its
probes run during the run: bench/trace_overhead.py measures what they cost.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerbench.core.errors import SetupError
from layerbench.core.facts import Fact, declare
from layerbench.core.runs import RunRecord
from layerbench.linux import namespace, system
from layerbench.observe import measure
from layerbench.scratch import Scratch

TRACE_BLOCK = Fact(
    "trace_block",
    "during",
    "per device, the block requests' latency histogram ([low µs, high µs, count])",
    dict[str, list[tuple[int, int, int]]],
)
TRACE_BLOCK_MISSING = Fact(
    "trace_block_missing", "during", "why a block trace that was asked for is missing", str
)
declare(TRACE_BLOCK, TRACE_BLOCK_MISSING)

PROGRAM_ENV = "LAYERBENCH_BPFTRACE"  # the bpftrace to run (tests point it at a missing one)
TRACEFS = Path("/sys/kernel/tracing")
KINDS = ("block",)
_ATTACH_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 30.0
# bpftrace prints "attached_probes" before it can take a SIGINT: one sent between the two is
# lost and bpftrace runs on (4 of 15 starts here, stopped at once). BEGIN fires once every
# probe is attached and its printf is written from the loop that takes the SIGINT, so the
# trace counts as started only once this marker is in the output.
_READY = "layerbench-trace-ready"
# bpftrace 0.17 (Debian 12) acts on a SIGINT only when it interrupts its epoll_wait; one that
# arrives while bpftrace is between two waits (its 100 ms wait timed out and it has not yet
# waited again: a wide window on a busy CPU) only sets a flag, which it reads when the next
# trace event arrives. This script makes no events after BEGIN, so the trace ran on until the
# stop timeout (a busy round of tests/e2e/test_why.py). The stop is therefore an event too:
# the SIGINT that this process sends to bpftrace fires signal:signal_generate, and the probe
# on it calls exit(), whose event ends the trace whenever the signal itself arrived.
_SCRIPT = """\
BEGIN {{ printf("{ready}\\n"); }}
tracepoint:block:block_rq_issue {{ @start[args->dev, args->sector] = nsecs; }}
tracepoint:block:block_rq_complete /@start[args->dev, args->sector]/ {{
  @usecs[args->dev] = hist((nsecs - @start[args->dev, args->sector]) / 1000);
  delete(@start[args->dev, args->sector]);
}}
tracepoint:signal:signal_generate
  /pid == {sender} && args->sig == {sigint} && args->comm == "bpftrace"/ {{ exit(); }}
END {{ clear(@start); }}
"""


def script(sender: int) -> str:
    """The trace's bpftrace program, stopped by a SIGINT from process `sender`."""
    return _SCRIPT.format(ready=_READY, sender=sender, sigint=int(signal.SIGINT))


def program() -> str:
    return os.environ.get(PROGRAM_ENV, "bpftrace")


def missing() -> str | None:
    """Why this host cannot trace, or None when it can (tracefs aside: see ready())."""
    if shutil.which(program()) is None:
        return f"{program()} is not installed (apt install bpftrace)"
    if not Path("/sys/kernel/btf/vmlinux").exists():
        return "the kernel has no BTF (/sys/kernel/btf/vmlinux)"
    return None


def _tracefs_mounted() -> bool:
    return (TRACEFS / "events" / "block" / "block_rq_issue").exists()


def ready() -> str | None:
    """None when a trace can start now (mounting tracefs in our own namespace if needed)."""
    if reason := missing():
        return reason
    if _tracefs_mounted():
        return None
    if not namespace.PRIVATE:
        return (
            f"tracefs is not mounted at {TRACEFS} and this run shares the host's mount table "
            "(--no-namespace); mount it, or run in layerbench's own namespace"
        )
    try:
        system.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)])
    except SetupError as exc:
        return f"cannot mount tracefs in the run's namespace: {exc}"
    return None if _tracefs_mounted() else "tracefs has no block tracepoints"


@dataclass
class Trace:
    """What one run's trace gave: per device, (low µs, high µs, count) buckets."""

    missing: str | None = None
    histograms: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)

    def facts(self) -> dict[str, Any]:
        if self.missing:
            return {TRACE_BLOCK_MISSING.key: self.missing}
        return {
            TRACE_BLOCK.key: {
                device: [list(b) for b in buckets] for device, buckets in self.histograms.items()
            }
        }


def _device_names() -> dict[int, str]:
    """Kernel dev_t (major << 20 | minor, as the tracepoints give it) -> device name."""
    found = {}
    for entry in Path("/sys/class/block").iterdir():
        with contextlib.suppress(OSError, ValueError):
            major, minor = (int(v) for v in (entry / "dev").read_text().split(":"))
            found[(major << 20) | minor] = entry.name
    return found


def parse(text: str) -> dict[str, list[tuple[int, int, int]]]:
    """bpftrace's `-f json` output -> {device: [(low, high, count), ...]}."""
    names = _device_names()
    found: dict[str, list[tuple[int, int, int]]] = {}
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("type") != "hist":
                continue
            for dev, buckets in record["data"].get("@usecs", {}).items():
                name = names.get(int(dev), f"dev {int(dev) >> 20}:{int(dev) & 0xFFFFF}")
                found[name] = [
                    (int(b.get("min", 0)), int(b.get("max", b.get("min", 0))), int(b["count"]))
                    for b in buckets
                    if b.get("count")
                ]
    return found


@contextlib.contextmanager
def block_trace(scratch: Scratch, workdir: Path) -> Iterator[Trace]:
    """Trace the block layer while the body runs (the timed run); the histograms are in
    the Trace once the body is done."""
    trace = Trace()
    if reason := ready():
        trace.missing = reason
        yield trace
        return
    source, output = workdir / "block.bt", workdir / "block.json"
    source.write_text(script(os.getpid()))
    output.unlink(missing_ok=True)  # a marker left by an earlier trace is not this one's

    def start() -> subprocess.Popen[bytes]:
        with open(workdir / "bpftrace.err", "wb") as errors:
            return subprocess.Popen(
                [program(), "-f", "json", "-o", str(output), str(source)],
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                start_new_session=True,
            )

    with scratch.process(start, "bpftrace block trace", named=source) as child:
        try:
            if not _attached(child, output):
                trace.missing = f"bpftrace did not attach: {_last_error(workdir)}"
            yield trace
            if trace.missing is None:
                child.send_signal(signal.SIGINT)  # it prints its maps and exits
                try:
                    child.wait(timeout=_STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    trace.missing = f"bpftrace did not stop within {_STOP_TIMEOUT_S:.0f} s of SIGINT"
                else:
                    trace.histograms = parse(output.read_text())
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()


def _attached(child: subprocess.Popen[bytes], output: Path) -> bool:
    deadline = time.monotonic() + _ATTACH_TIMEOUT_S
    while time.monotonic() < deadline and child.poll() is None:
        with contextlib.suppress(OSError):
            if _READY in output.read_text():
                return True
        time.sleep(0.02)
    return False


def _last_error(workdir: Path) -> str:
    with contextlib.suppress(OSError):
        lines = [
            line
            for line in (workdir / "bpftrace.err").read_text(errors="replace").splitlines()
            if line.strip() and "RLIMIT_MEMLOCK" not in line
        ]
        if lines:
            return lines[-1]
    return "no message"


def cdf(buckets: list[tuple[int, int, int]]) -> tuple[list[float], list[float]]:
    """(upper bound µs, share of requests completed within it) for a latency CDF plot."""
    total = sum(count for _, _, count in buckets)
    shares, running = [], 0
    for _, _, count in buckets:
        running += count
        shares.append(running / total if total else 0.0)
    return [float(max(high, 1)) for _, high, _ in buckets], shares


def warnings(runs: list[RunRecord]) -> list[str]:
    """One line per workload whose trace was asked for and not recorded, with why."""
    said: dict[str, str] = {}
    for run in runs:
        reason = run.fact(TRACE_BLOCK_MISSING)
        if reason and run.workload not in said:
            said[run.workload] = reason
    return [
        f'workload {workload}: trace = "block" was not recorded: {reason}; the runs went on without it'
        for workload, reason in said.items()
    ]


def stack_lines(
    groups: dict[tuple[str, str], list[RunRecord]], stacks: list[str], workload: str
) -> dict[str, tuple[list[float], list[float]]]:
    """For a latency CDF figure: per stack and device of the stack, its requests' latency
    over all the stack's measured runs."""
    lines = {}
    for stack in stacks:
        traced = [(r, trace) for r in groups.get((stack, workload), []) if (trace := r.fact(TRACE_BLOCK))]
        chain = measure.device_chain([r for r, _ in traced]) or []
        for device in chain:
            merged: dict[tuple[int, int], int] = {}
            for _, trace in traced:
                for low, high, count in trace.get(device, []):
                    merged[(low, high)] = merged.get((low, high), 0) + count
            if merged:
                buckets = sorted((low, high, count) for (low, high), count in merged.items())
                lines[f"{stack}: {device}"] = cdf(buckets)
    return lines
