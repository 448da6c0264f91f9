"""fio: a fio job (a job file as it is, or inline options) run on the stack's top, with
layerbench's repetitions, interleaving and statistics on top of fio's own figures.

The stack decides where the job runs (`--directory` is its top; a job naming `directory`
or `filename` is refused). The untimed prepare lays the files out (`--create_only=1`), then
the caches are dropped as for every workload; the timed run is fio itself. From fio's
json+ output, per direction (read, write): IOPS, bandwidth, bytes and the completion
latency's mean and percentiles (from the merged latency bins of every job, so several
jobs give their group's figures), stored as registry metrics; the bins stay in the run's
facts for the latency CDF.

A layer that refuses O_DIRECT (tmpfs, many FUSE file systems) is found in the prepare, by
opening and writing one aligned block with O_DIRECT on the top; `direct_refused` then runs
the job buffered with an end fsync (the default, said in every report), fails the run, or
skips it (a failed run whose error says so)."""

import contextlib
import itertools
import json
import mmap
import os
import re
import subprocess
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationInfo, field_validator, model_validator
from typing_extensions import TypedDict  # pydantic validates it before Python 3.12

from layerbench.core.errors import SetupError
from layerbench.core.facts import Fact, declare
from layerbench.core.runs import RunRecord, known
from layerbench.core.sizes import parse_size
from layerbench.linux import system
from layerbench.stacks.base import BuildContext, BuiltStack
from layerbench.workloads.base import LatencyCdf, Prepared, Workload, WorkloadOptions, register


class FioJob(TypedDict, total=False):
    """One fio job's own figures (the `fio_jobs` fact): its name, error, IOPS and bandwidth."""

    name: str | None
    error: int | None
    read_iops: float | None
    write_iops: float | None
    read_bw_bytes: int | None
    write_bw_bytes: int | None


FIO_JOBS = Fact("fio_jobs", "during", "each fio job's own figures", list[FioJob])
FIO_CLAT_BINS = Fact(
    "fio_clat_bins",
    "during",
    "per direction, fio's completion-latency bins (the latency CDF)",
    dict[str, dict[str, int]],
)
FIO_BUFFERED = Fact("fio_buffered", "during", "why a job asked for direct I/O ran buffered", str)
declare(FIO_JOBS, FIO_CLAT_BINS, FIO_BUFFERED)

REFUSED_KEYS = ("directory", "filename", "filename_format", "opendir")  # the stack decides where
PERCENTILES = {"p50": "50.000000", "p90": "90.000000", "p99": "99.000000", "p999": "99.900000"}
DIRECTIONS = ("read", "write")
_SECTION = re.compile(r"^\s*\[([^\]]+)\]\s*$")
OptionValue = str | int | float | bool


class FioOptions(WorkloadOptions):
    job: str | None = None  # a fio job file, relative to the plan file
    options: dict[str, OptionValue] | None = None  # or one job's options inline
    direct_refused: Literal["buffered", "fail", "skip"] = "buffered"

    @field_validator("job")
    @classmethod
    def _job(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        base = Path((info.context or {}).get("plan_dir", "."))
        path = (base / value).resolve()
        if not path.is_file():
            raise ValueError(f"job file {path} does not exist (a path relative to the plan file)")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"job file {path}: {exc}") from None
        if named := _refused_keys(text):
            raise ValueError(f"job file {path} sets {named}: the stack decides where fio runs; remove it")
        return str(path)

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict[str, OptionValue] | None) -> dict[str, OptionValue] | None:
        if value is not None and (named := [k for k in value if k in REFUSED_KEYS]):
            raise ValueError(f"sets {named[0]}: the stack decides where fio runs; remove it")
        return value

    @model_validator(mode="after")
    def _one_job(self) -> "FioOptions":
        if (self.job is None) == (self.options is None):
            raise ValueError("give either job (a fio job file) or options (one job inline), not both")
        if system.tool_path("fio") is not None and (problem := _parse_only(job_text(self))):
            raise ValueError(f"fio cannot parse the job: {problem}")
        return self


def _refused_keys(text: str) -> str | None:
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip().lower()
        if key in REFUSED_KEYS:
            return key
    return None


def job_text(options: FioOptions, name: str = "job") -> str:
    if options.job is not None:
        return Path(options.job).read_text()
    lines = [f"[{name}]"]
    for key, value in (options.options or {}).items():
        if value is True:
            lines.append(key)
        elif value is not False:
            lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def _parse_only(text: str) -> str | None:
    """fio's own check of a job, its first complaint in one line (None: it parses)."""
    try:
        done = subprocess.run(
            ["fio", "--parse-only", "-"], input=text, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode == 0:
        return None
    said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    return "; ".join(said[:2]) or f"exit {done.returncode}"


def wants_direct(text: str) -> bool:
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "direct" and value.strip() not in ("", "0"):
            return True
    return False


def buffered(text: str) -> str:
    """The job with O_DIRECT off and an end fsync in every section (set last, so it wins)."""
    sections: list[list[str]] = [[]]
    for line in text.splitlines():
        if _SECTION.match(line):
            sections.append([])
        sections[-1].append(line)
    return (
        "\n".join(
            "\n".join([*lines, "direct=0", "end_fsync=1"])
            if lines and _SECTION.match(lines[0])
            else "\n".join(lines)
            for lines in sections
        )
        + "\n"
    )


def job_bytes(text: str) -> int:
    """An upper estimate of the bytes a job lays out: each job section's `size` (its own or
    the global one) times its `numjobs`. A size fio reads as a share of the device ("50%")
    or cannot be read here counts 0 (unknown)."""
    sections: list[dict[str, str]] = []
    shared: dict[str, str] = {}
    current: dict[str, str] | None = None
    for line in text.splitlines():
        line = line.split(";", 1)[0].split("#", 1)[0].strip()
        if match := _SECTION.match(line):
            current = shared if match.group(1).strip() == "global" else {}
            if current is not shared:
                sections.append(current)
        elif "=" in line and current is not None:
            key, _, value = line.partition("=")
            current[key.strip()] = value.strip()
    total = 0
    for section in sections:
        values = shared | section
        try:
            size = parse_size(values.get("size", "0"))
            jobs = int(values.get("numjobs", "1"))
        except ValueError:
            continue
        total += size * max(1, jobs)
    return total


def refuses_direct(top: Path) -> str | None:
    """Open and write one aligned block with O_DIRECT on the top: the error, or None."""
    probe = top / ".layerbench-odirect"
    block = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT wants
    try:
        descriptor = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
        try:
            os.write(descriptor, block)
        finally:
            os.close(descriptor)
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        block.close()
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


def _merged_bins(jobs: list[dict[str, Any]], direction: str) -> dict[int, int]:
    bins: dict[int, int] = {}
    for job in jobs:
        for latency, count in job.get(direction, {}).get("clat_ns", {}).get("bins", {}).items():
            bins[int(latency)] = bins.get(int(latency), 0) + int(count)
    return bins


def _percentile(bins: dict[int, int], share: float) -> float | None:
    total = sum(bins.values())
    if not total:
        return None
    wanted = share * total
    seen = 0
    for latency in sorted(bins):
        seen += bins[latency]
        if seen >= wanted:
            return float(latency)
    return float(max(bins))


def figures_of(document: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    """fio's JSON -> (registry metrics, facts): the group's totals, each job's own figures."""
    jobs = document.get("jobs", [])
    found: dict[str, float] = {}
    facts: dict[str, Any] = {"fio_jobs": [], "fio_clat_bins": {}}
    for direction in DIRECTIONS:
        parts = [job.get(direction, {}) for job in jobs]
        total_ios = sum(int(p.get("total_ios", 0)) for p in parts)
        if not total_ios:
            continue
        found[f"{direction}_iops"] = sum(float(p.get("iops", 0)) for p in parts)
        found[f"{direction}_bw_bytes"] = sum(float(p.get("bw_bytes", 0)) for p in parts)
        found[f"{direction}_io_bytes"] = sum(int(p.get("io_bytes", 0)) for p in parts)
        counts = [int(p.get("clat_ns", {}).get("N", 0)) for p in parts]
        means = [float(p.get("clat_ns", {}).get("mean", 0)) for p in parts]
        if sum(counts):
            found[f"{direction}_clat_mean_ns"] = sum(c * m for c, m in zip(counts, means, strict=True)) / sum(
                counts
            )
        bins = _merged_bins(jobs, direction)
        for name, key in PERCENTILES.items():
            value = _percentile(bins, float(key) / 100) if bins else None
            if value is None and len(parts) == 1:  # json without bins: fio's own percentile
                value = parts[0].get("clat_ns", {}).get("percentile", {}).get(key)
            if value is not None:
                found[f"{direction}_clat_{name}_ns"] = float(value)
        facts["fio_clat_bins"][direction] = {str(k): v for k, v in sorted(bins.items())}
    if jobs:
        found["fio_runtime_s"] = max(float(job.get("job_runtime", 0)) for job in jobs) / 1000
    for job in jobs:
        facts["fio_jobs"].append(
            {
                "name": job.get("jobname"),
                "error": job.get("error"),
                **{f"{d}_iops": job.get(d, {}).get("iops") for d in DIRECTIONS},
                **{f"{d}_bw_bytes": job.get(d, {}).get("bw_bytes") for d in DIRECTIONS},
            }
        )
    return found, facts


@register
class Fio(Workload[FioOptions]):
    kind = "fio"
    Options = FioOptions
    summary = "a fio job (a job file or inline options) on the stack's top: IOPS, bandwidth, latency"
    reusable = True
    tools = ("fio",)
    writes = True
    # A direction the job does not do has no rows, so a read job leads with read IOPS.
    headline_metrics = ("read_iops", "read_clat_p99_ns", "write_iops", "write_clat_p99_ns", "wall_s")

    def data_bytes(self, capacity: int | None, reference: int | None) -> int:
        return job_bytes(job_text(self.options, self.name))

    def prepare(self, ctx: BuildContext, stack: BuiltStack, resources: contextlib.ExitStack) -> Prepared:
        options = self.options
        text = job_text(options, self.name)
        facts: dict[str, object] = {}
        if wants_direct(text) and (refusal := refuses_direct(stack.top)):
            said = f"O_DIRECT refused on this stack ({refusal})"
            if options.direct_refused == "fail":
                raise SetupError(f'fio: {said}; direct_refused = "fail"')
            if options.direct_refused == "skip":
                raise SetupError(f'skipped: fio: {said}; direct_refused = "skip"')
            text = buffered(text)
            facts[FIO_BUFFERED.key] = f"ran buffered: {said}"
        job = ctx.workdir / "job.fio"
        job.write_text(text)
        output = ctx.workdir / "fio.json"
        common = ["fio", f"--directory={stack.top}", str(job)]
        system.run([*common[:2], "--create_only=1", "--output-format=terse", common[2]], timeout=3600)
        system.run(["sync", "-f", str(stack.top)])
        prepared = Prepared(
            argv=[*common[:2], "--output-format=json+", f"--output={output}", common[2]],
            cwd=stack.top,
            unit="bytes",
            facts=facts,
        )
        synced = re.search(r"^\s*end_fsync\s*=\s*1\s*$", text, re.MULTILINE) is not None
        prepared.after_run = lambda done: _collect(done, output, durable=synced)
        return prepared

    @classmethod
    def notes(cls, runs: dict[str, list[RunRecord]]) -> list[str]:
        found = []
        for stack, group in runs.items():
            said = {said for r in group if (said := r.fact(FIO_BUFFERED))}
            found += [f"{stack}: {line}" for line in sorted(said)]
            if cached := cached_reads(group):
                found.append(f"{stack}: {cached}")
        return found

    @classmethod
    def latency_cdfs(cls, workload: str, runs: dict[str, list[RunRecord]]) -> list[LatencyCdf]:
        """Each direction's completion latency: one line per stack, over its measured runs."""
        found = []
        for direction in DIRECTIONS:
            lines = {}
            for stack, group in runs.items():
                bins: dict[int, int] = {}
                for run in group:
                    if run.ok:
                        for latency, count in (run.fact(FIO_CLAT_BINS) or {}).get(direction, {}).items():
                            bins[int(latency)] = bins.get(int(latency), 0) + int(count)
                if total := sum(bins.values()):
                    ordered = sorted(bins)
                    shares = list(itertools.accumulate(bins[latency] / total for latency in ordered))
                    lines[stack] = ([latency / 1000 for latency in ordered], shares)
            if lines:
                title = f"{workload}: {direction} completion latency, every measured run"
                found.append(LatencyCdf(f"latency-cdf-{workload}-{direction}", title, lines))
        return found

    @classmethod
    def details(cls, runs: dict[str, list[RunRecord]]) -> tuple[list[str], list[list[str]]] | None:
        header = ["stack", "read IOPS", "read p99", "write IOPS", "write p99", "mode"]
        rows = []
        for stack, group in runs.items():
            ok = [r for r in group if r.ok]

            def median(key: str, runs_of: list[RunRecord] = ok) -> float | None:
                values = sorted(known(runs_of, key))
                return values[len(values) // 2] if values else None

            mode = (
                "buffered (O_DIRECT refused)" if any(r.fact(FIO_BUFFERED) for r in ok) else "as the job says"
            )
            cells = [
                _fmt(median("read_iops"), ""),
                _fmt_ns(median("read_clat_p99_ns")),
                _fmt(median("write_iops"), ""),
                _fmt_ns(median("write_clat_p99_ns")),
            ]
            rows.append([stack, *cells, mode])
        return header, rows


COLD_SHARE = 0.9  # a cold read moves at least this share of fio's read bytes off the lowest device


def cached_reads(runs: list[RunRecord]) -> str | None:
    """Reads really are reads only if the lowest device under the stack (not a loop device:
    the disk behind it) delivered the bytes fio read within the timed run; otherwise a cache
    in some layer served them. None when every run read cold or the stack has no device."""
    short = []
    for run in runs:
        wanted = run.value("read_io_bytes") or 0
        disks = {name: d for name, d in run.devices.items() if not name.startswith("loop")}
        if not run.ok or not wanted or not disks:
            continue
        got = sum(d.get("read_bytes", 0) for d in disks.values())
        if got < COLD_SHARE * wanted:
            short.append((got / wanted, ", ".join(sorted(disks))))
    if not short:
        return None
    worst, where = min(short)
    return (
        f"reads served from a cache in {len(short)} of {len(runs)} runs: as little as {worst:.0%} of the "
        f"bytes fio read came from {where} within the run"
    )


def _fmt(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:,.0f}{unit}"


def _fmt_ns(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1e6:.2f} ms" if value >= 1e6 else f"{value / 1e3:.1f} µs"


def _collect(prepared: Prepared, output: Path, *, durable: bool = False) -> None:
    """After the timed run: fio's figures into the run's metrics and facts. durable: the job
    ends with an fsync, so what it wrote is claimed durable."""
    try:
        document = json.loads(output.read_text())
    except (OSError, ValueError):
        return  # a failed run: its error comes from fio's exit status and stderr
    found, facts = figures_of(document)
    errors = [f"fio job {j['name']}: {os.strerror(j['error'])}" for j in facts["fio_jobs"] if j.get("error")]
    prepared.failure = "; ".join(errors) or None
    prepared.metrics.update(found)
    prepared.facts.update(facts)
    prepared.units = sum(found.get(f"{d}_io_bytes", 0) for d in DIRECTIONS) or None
    if durable and found.get("write_io_bytes"):
        prepared.durable_bytes = int(found["write_io_bytes"])
