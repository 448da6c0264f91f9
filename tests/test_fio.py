"""The fio workload's own logic: its options, the job rewrites, and fio's real JSON."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from layerbench.core.errors import UserError
from layerbench.core.runs import RunRecord
from layerbench.plan import parse_plan
from layerbench.workloads import fio

needs_fio = pytest.mark.skipif(
    shutil.which("fio") is None, reason="fio is not installed (apt-get install fio)"
)

JOB = """[global]
ioengine=psync
direct=1
size=4M

[reader]
rw=randread
bs=4k
"""


def _plan(workload: str) -> str:
    return f'name = "f"\n[stacks.disk]\nlayers = []\n[workloads.w]\nkind = "fio"\n{workload}\n'


def test_buffered_turns_direct_off_last_in_every_section() -> None:
    text = fio.buffered(JOB)
    sections = text.split("[reader]")
    assert sections[0].rstrip().endswith("direct=0\nend_fsync=1")
    assert sections[1].rstrip().endswith("direct=0\nend_fsync=1")
    assert fio.wants_direct(JOB) and not fio.wants_direct(JOB.replace("direct=1", "direct=0"))


def test_inline_options_become_one_job_section() -> None:
    options = fio.FioOptions(
        kind="fio", options={"rw": "write", "bs": "1M", "end_fsync": 1, "time_based": True}
    )
    assert fio.job_text(options, "seq") == "[seq]\nrw=write\nbs=1M\nend_fsync=1\ntime_based\n"


@needs_fio
@pytest.mark.parametrize(
    ("workload", "said"),
    [
        ('options = { rw = "read", directory = "/tmp" }', "workloads.w.options: sets directory"),
        ('options = { rw = "read", bogus_key = 1 }', "fio cannot parse the job: Bad option <bogus_key=1>"),
        ('job = "missing.fio"', "does not exist"),
        ('job = "j.fio"\noptions = { rw = "read" }', "either job"),
        ("", "either job"),
    ],
)
def test_bad_fio_workloads_are_one_line(tmp_path: Path, workload: str, said: str) -> None:
    (tmp_path / "j.fio").write_text(JOB)
    with pytest.raises(UserError) as caught:
        parse_plan(_plan(workload), str(tmp_path / "plan.toml"))
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_job_file_naming_its_own_place_is_refused(tmp_path: Path) -> None:
    (tmp_path / "j.fio").write_text(JOB + "filename=/dev/sda\n")
    with pytest.raises(UserError, match="sets filename: the stack decides where fio runs"):
        parse_plan(_plan('job = "j.fio"'), str(tmp_path / "plan.toml"))


@needs_fio
def test_a_job_file_is_found_next_to_the_plan(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "j.fio").write_text(JOB)
    plan = parse_plan(_plan('job = "jobs/j.fio"'), str(tmp_path / "plan.toml"))
    assert plan.workloads["w"].job == str(tmp_path / "jobs" / "j.fio")


@needs_fio
def test_figures_of_real_fio_json_with_two_jobs(tmp_path: Path) -> None:
    """Two jobs, no group_reporting: IOPS summed, percentiles from the merged bins, which
    lie between the two jobs' own."""
    job = tmp_path / "two.fio"
    job.write_text("[global]\nioengine=psync\nsize=4M\nbs=4k\n[a]\nrw=randread\n[b]\nrw=randwrite\nbs=64k\n")
    out = tmp_path / "o.json"
    subprocess.run(
        ["fio", f"--directory={tmp_path}", "--output-format=json+", f"--output={out}", str(job)],
        check=True,
        capture_output=True,
    )
    document = json.loads(out.read_text())
    found, facts = fio.figures_of(document)
    (a, b) = document["jobs"]
    assert found["read_iops"] == pytest.approx(a["read"]["iops"] + b["read"]["iops"])
    assert found["write_io_bytes"] == b["write"]["io_bytes"] == 4 << 20
    assert found["read_io_bytes"] == 4 << 20
    own = float(a["read"]["clat_ns"]["percentile"]["99.000000"])
    assert 0.5 * own <= found["read_clat_p99_ns"] <= 2 * own  # bins vs fio's own rounding
    assert found["read_clat_p50_ns"] <= found["read_clat_p90_ns"] <= found["read_clat_p99_ns"]
    assert found["read_clat_p99_ns"] <= found["read_clat_p999_ns"]
    assert found["fio_runtime_s"] > 0
    assert [j["name"] for j in facts["fio_jobs"]] == ["a", "b"]
    assert sum(facts["fio_clat_bins"]["read"].values()) == a["read"]["total_ios"]


def test_odirect_probe_on_this_file_system(tmp_path: Path) -> None:
    assert fio.refuses_direct(tmp_path) in (None, "Invalid argument")
    assert list(tmp_path.iterdir()) == []


def _run(read: int, disk: int | None, loop: int = 0) -> RunRecord:
    devices = ({"vda": {"read_bytes": disk}} if disk is not None else {}) | (
        {"loop0": {"read_bytes": loop}} if loop else {}
    )
    return RunRecord(0, "a", "w", "ok", values={"read_io_bytes": read}, devices=devices)


def test_a_read_the_disk_delivered_is_cold_and_one_a_cache_served_is_named() -> None:
    assert fio.cached_reads([_run(100 << 20, 101 << 20)]) is None
    # The loop device saw every byte, the disk behind it a quarter: the image's backing file
    # was cached.
    said = fio.cached_reads([_run(100 << 20, 101 << 20), _run(100 << 20, 25 << 20, loop=100 << 20)])
    assert said == (
        "reads served from a cache in 1 of 2 runs: "
        "as little as 25% of the bytes fio read came from vda within the run"
    )
    assert fio.cached_reads([_run(1, None)]) is None


def test_the_footprint_of_a_job_is_its_sizes_times_its_jobs() -> None:
    text = "[global]\nsize=64M\n; a comment\n[a]\nrw=read\n[b]\nsize=1G\nnumjobs=4\n[c]\nsize=50%\n"
    assert fio.job_bytes(text) == (64 << 20) + 4 * (1 << 30)


def test_a_fio_job_that_cannot_fit_is_refused_at_plan_time(tmp_path: Path) -> None:
    plan = (
        'name = "f"\n[stacks.ram]\nlayers = [{ kind = "tmpfs", size = "64M" }]\n'
        '[workloads.w]\nkind = "fio"\noptions = { rw = "write", bs = "1M", size = "1G" }\n'
    )
    with pytest.raises(UserError, match="ram"):
        parse_plan(plan, str(tmp_path / "plan.toml"))
