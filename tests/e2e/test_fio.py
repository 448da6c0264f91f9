"""fio on real stacks: a job file and an inline job on a loop image and a tmpfs, a job that
fails at run time, bad input, and the O_DIRECT refusal where a layer here refuses it."""

import json
import math
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import (
    REPO,
    TEST_ROOT,
    assert_verdict_agrees,
    cli,
    drawn_figures,
    one_line_error,
    skip_unless_root,
)

from layerbench.executors.local import LocalExecutor
from layerbench.reports import render
from layerbench.scratch import Scratch
from layerbench.session import run_plan
from layerbench.stacks.base import LAYER_KINDS, register
from layerbench.stacks.fuse import FuseLayer
from layerbench.store import Store

pytestmark = pytest.mark.e2e

JOB = """; 4 KiB random reads, O_DIRECT
[global]
ioengine=psync
direct=1
size=8M

[randread]
rw=randread
bs=4k
"""

PLAN = """
name = "fio-e2e"
reps = 3
warmup = 0
seed = 5
rerun_disturbed = 0
baseline = "image"
[stacks.image]
layers = [{ kind = "image", fs = "ext4", size = "64M" }]
[stacks.ram]
layers = [{ kind = "tmpfs", size = "32M" }]
[workloads.rand]
kind = "fio"
job = "jobs/randread.fio"
[workloads.seq]
kind = "fio"
options = { rw = "write", bs = "1M", size = "8M", ioengine = "psync", end_fsync = 1 }
[workloads.missing]
kind = "fio"
# Created when opened (so the layout makes nothing), and fio may not create it: every run
# fails at run time, with the error fio reports for the job.
options = { rw = "read", bs = "1M", size = "4M", create_on_open = 1, allow_file_create = 0 }
"""


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    skip_unless_root()
    base = tmp_path_factory.mktemp("fio")
    (base / "jobs").mkdir()
    (base / "jobs" / "randread.fio").write_text(JOB)
    (base / "plan.toml").write_text(PLAN)
    db = base / "results.db"
    cli(
        "run",
        str(base / "plan.toml"),
        "--db",
        str(db),
        "--scratch",
        str(TEST_ROOT / "fio-run"),
        "--quiet",
        check=True,
    )
    return db


@pytest.fixture(scope="module")
def experiment(db: Path) -> dict:
    return json.loads(cli("report", "--db", str(db), "--format", "json", check=True).stdout)


def test_the_html_report_draws_a_latency_cdf_per_workload_and_direction(db: Path, tmp_path: Path) -> None:
    if shutil.which("chromium") is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    page = tmp_path / "report.html"
    cli("report", "--db", str(db), "--format", "html", "-o", str(page), check=True)
    everything, dom = drawn_figures(page, tmp_path)
    drawn = {name: size for name, size in everything.items() if name.startswith("latency-cdf-")}
    # rand reads and seq writes (every run of missing failed: no latencies).
    assert set(drawn) == {"latency-cdf-rand-read", "latency-cdf-seq-write"}, dom[-1500:]
    assert all(w > 300 and h > 100 for w, h in drawn.values()), drawn
    # One line per stack with runs: both stacks on rand.
    svg = page.read_text().split('id="latency-cdf-rand-read"')[1].split("</svg>")[0]
    assert "image" in svg and "ram" in svg


def _rows(document: dict, workload: str, metric: str) -> dict[str, dict]:
    return {r["stack"]: r for r in document["summary"] if (r["workload"], r["metric"]) == (workload, metric)}


def test_a_job_file_and_an_inline_job_give_iops_and_latency_rows(experiment: dict) -> None:
    iops = _rows(experiment, "rand", "read_iops")
    p99 = _rows(experiment, "rand", "read_clat_p99_ns")
    assert set(iops) == set(p99) == {"image", "ram"}
    assert iops["image"]["decision"] == "baseline" and iops["ram"]["ratio"] is not None
    for row in (iops["ram"], p99["ram"]):
        # 3 runs, less any that other work disturbed (kept out of the statistics)
        # An unbounded interval's end is written as null (JSON has no infinity): two runs a side,
        # one disturbed run left out, may not bound a rank method's interval.
        high = math.inf if row["ratio_ci_high"] is None else row["ratio_ci_high"]
        assert row["n"] in (2, 3) and row["ratio_ci_low"] <= row["ratio"] <= high
        assert_verdict_agrees(row)
    assert iops["ram"]["median"] > 0 and p99["ram"]["median"] > 0
    write = _rows(experiment, "seq", "write_bw_bytes")
    assert write["ram"]["median"] > 0 and not _rows(experiment, "seq", "read_iops")
    # Only fio workloads report fio's metrics; every run of them has its bins.
    runs = [r for r in experiment["runs"] if r["workload"] == "rand" and r["status"] == "ok"]
    assert len(runs) == 6 and all(sum(r["facts"]["fio_clat_bins"]["read"].values()) > 0 for r in runs)
    assert all(r["read_io_bytes"] == 8 << 20 for r in runs)


def test_a_job_that_fails_at_run_time_is_a_failed_run_with_fios_error(experiment: dict) -> None:
    failed = [r for r in experiment["runs"] if r["workload"] == "missing"]
    assert len(failed) == 6 and all(r["status"] == "failed" for r in failed)
    said = "exit status 1; fio job missing: No such file or directory"
    assert all(r["error"].startswith(said) for r in failed), failed[0]["error"]
    # The trials after the failures ran: every other workload has all its runs.
    assert sum(r["status"] == "ok" for r in experiment["runs"]) == 12


def test_bad_fio_input_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "plan.toml").write_text(PLAN.replace("jobs/randread.fio", "jobs/nowhere.fio"))
    said = one_line_error(cli("check", str(tmp_path / "plan.toml")))
    assert "workloads.rand.job" in said and "does not exist" in said
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "randread.fio").write_text(JOB + "directory=/srv\n")
    (tmp_path / "plan.toml").write_text(PLAN)
    said = one_line_error(cli("run", str(tmp_path / "plan.toml"), "--db", str(tmp_path / "r.db")))
    assert "sets directory" in said and not (tmp_path / "r.db").exists()


NO_DIRECT_PLAN = """
name = "fio-no-direct"
reps = 2
warmup = 0
rerun_disturbed = 0
[stacks.refusing]
layers = [{{ kind = "test-no-odirect" }}]
[workloads.w]
kind = "fio"
options = {{ rw = "write", bs = "64k", size = "4M", direct = 1, ioengine = "psync" }}
direct_refused = "{mode}"
"""


@pytest.fixture
def refusing_layer() -> Iterator[None]:
    """A FUSE passthrough that answers O_DIRECT opens with EINVAL (tests/fuse/): this
    kernel's tmpfs and bindfs accept O_DIRECT, many FUSE file systems do not."""
    try:
        import fuse  # noqa: F401 - fusepy, needs libfuse2
    except (ImportError, OSError) as exc:
        pytest.skip(f"fusepy with libfuse2 is missing (pip install fusepy; apt-get install libfuse2): {exc}")

    @register
    class NoDirectFuse(FuseLayer):
        kind = "test-no-odirect"
        summary = "a FUSE passthrough that refuses O_DIRECT (tests only)"
        tools = ("umount",)
        daemon_name = "no_odirect_fs"

        def daemon_argv(self, source: Path, target: Path) -> list[str]:
            return [
                sys.executable,
                str(REPO / "tests" / "fuse" / "no_odirect_fs.py"),
                str(source),
                str(target),
            ]

    try:
        yield
    finally:
        del LAYER_KINDS["test-no-odirect"]


@pytest.mark.parametrize("mode", ["buffered", "fail", "skip"])
def test_odirect_refused_runs_buffered_fails_or_skips(
    needs_root: None, refusing_layer: None, scratch_root: Path, tmp_path: Path, mode: str
) -> None:
    with Scratch(scratch_root) as scratch, Store(tmp_path / "r.db") as store:
        scratch.lock("the test")
        data = run_plan(NO_DIRECT_PLAN.format(mode=mode), store, LocalExecutor(scratch))
    runs = data.runs
    assert len(runs) == 2
    if mode == "buffered":
        assert all(r.ok and r.value("write_io_bytes") == 4 << 20 for r in runs), runs
        said = "ran buffered: O_DIRECT refused on this stack (Invalid argument)"
        assert all(r.facts["fio_buffered"] == said for r in runs)
        # Every report format says so beside the stack: the warnings and fio's own table.
        assert f"refusing: {said}" in data.warnings
        text = render(data, "text")
        assert "buffered (O_DIRECT refused)" in text and said in text
    else:
        assert all(r.status == "failed" for r in runs)
        errors = {r.error for r in runs}
        said = f'fio: O_DIRECT refused on this stack (Invalid argument); direct_refused = "{mode}"'
        expected = f"setup: {said}" if mode == "fail" else f"setup: skipped: {said}"
        assert errors == {expected}, errors
