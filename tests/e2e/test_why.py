"""The measured why for real: the kernel's counters in every run, the split and the byte
flow in every report format, and the durability check catching a sync that stops at the
top of the stack."""

import json
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
from helpers import TEST_ROOT, cli, drawn_figures, leftovers, skip_unless_root, vm_capable

pytestmark = pytest.mark.e2e

PLAN = """
name = "why"
reps = 3
warmup = 0
rerun_disturbed = 0
baseline = "disk"
[stacks.disk]
layers = []
[stacks.image]
layers = [{ kind = "image", size = "128M" }]
[stacks.fuse]
layers = [{ kind = "fuse" }]
[workloads.write]
kind = "stream-write"
size = "16M"
[workloads.untar]
kind = "extract"
archive = "builtin:small-tree"
"""


def _report(db: Path, form: str) -> str:
    return cli("report", "1", "--db", str(db), "--format", form, check=True).stdout


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    skip_unless_root()
    base = tmp_path_factory.mktemp("why")
    (base / "plan.toml").write_text(PLAN)
    scratch = TEST_ROOT / "e2e-why"
    cli(
        "run",
        str(base / "plan.toml"),
        "--db",
        str(base / "r.db"),
        "--scratch",
        str(scratch),
        "--quiet",
        check=True,
    )
    assert leftovers(scratch) == []
    return base / "r.db"


def test_every_run_has_the_kernel_counters_and_its_layers(experiment: Path) -> None:
    document = json.loads(_report(experiment, "json"))
    assert document["schema_version"] == 6
    runs = [r for r in document["runs"] if r["status"] == "ok"]
    assert len(runs) == 18
    for run in runs:
        kernel = run["facts"]["kernel"]
        assert run["kthread_cpu_s"] is not None and run["kthread_cpu_s"] >= 0
        assert run["disk_write_bytes"] is not None and run["disk_busy_pct"] is not None
        if Path("/proc/pressure/io").exists():
            assert kernel["psi_scope"] in ("run", "system")
            assert 0 <= run["psi_io_some_s"] <= run["wall_s"] + 0.05 or kernel["psi_scope"] == "system"
        # Each durable workload moved its bytes to the disk inside the run.
        assert run["facts"]["durability"]["durable"], run["facts"]["durability"]
        layers = run["layers"]
        assert [layer["device"] for layer in layers] == kernel["devices_top_first"]
        if run["stack"] == "image":
            assert layers[0]["device"].startswith("loop") and len(layers) == 2
        if run["workload"] == "write":
            assert layers[-1]["write_amplification"] >= 0.9


def test_each_elapsed_row_has_its_split_and_attribution(experiment: Path) -> None:
    document = json.loads(_report(experiment, "json"))
    rows = [r for r in document["summary"] if r["metric"] == "wall_s"]
    assert len(rows) == 6
    for row in rows:
        split = row["decomposition"]["split"]
        parts = split["parts_s"]
        assert set(parts) >= {"user_s", "sys_s", "helper_cpu_s", "kthread_cpu_s", "psi_io_some_s"}
        total = sum(v for v in parts.values() if v is not None) + split["rest_s"]
        assert total == pytest.approx(split["elapsed_s"])
        attribution = row["decomposition"]["attribution"]
        if row["stack"] == "disk":
            assert attribution is None
            continue
        named = sum(part["delta_s"] for part in attribution["named"])
        assert named + attribution["unattributed_s"] == pytest.approx(attribution["difference_s"])


def test_text_markdown_mail_and_html_show_the_split(experiment: Path, tmp_path: Path) -> None:
    text = _report(experiment, "text")
    assert text.count("Where the elapsed time went (medians)") == 2 and "fuse: " in text
    markdown = _report(experiment, "markdown")
    assert "**Where the elapsed time went (medians)**" in markdown
    assert "**Bytes written, down the stack (median run)**" in markdown
    assert "| image | 16M | loop" in markdown
    assert "Where the elapsed time went" in _report(experiment, "mail")
    page = tmp_path / "report.html"
    page.write_text(_report(experiment, "html"))
    drawn, dom = drawn_figures(page, tmp_path)
    for workload in ("write", "untar"):
        width, height = drawn[f"split-{workload}"]
        assert width > 300 and height > 60, dom[-2000:]
    assert "Bytes written, down the stack" in page.read_text()


def _durability(db: Path) -> dict[str, Any]:
    document = json.loads(_report(db, "json"))
    return {
        "facts": {r["stack"]: r["facts"].get("durability") for r in document["runs"] if r["status"] == "ok"},
        "warnings": document["warnings"],
    }


GUEST_PLAN = """
name = "durable"
reps = 1
warmup = 0
rerun_disturbed = 0
baseline = "guest"
[stacks.guest]
layers = [{ kind = "vm", cpus = 1, memory = "1G", disk_size = "512M" }]
[stacks.guest-fuse]
layers = [{ kind = "vm", cpus = 1, memory = "1G", disk_size = "512M" }, { kind = "fuse" }]
[workloads.untar]
kind = "extract"
archive = "ARCHIVE"
"""


def test_a_sync_that_stops_at_the_top_is_flagged_not_durable(needs_root: None, tmp_path: Path) -> None:
    """bindfs passes no syncfs down: with the sync of the file systems below switched off
    (a test-only switch), the extracted files stay dirty under the FUSE layer. It runs in a
    guest, whose page cache no program of this host can write back: on the host, another
    program's sync(2) during the run made the data durable by itself (docs/flakes.md). A
    writer on the host's disk moves the device's bytes, not the guest's dirty pages: the
    check reads those in the guest (on the host's reading alone, such a run read durable)."""
    vm_capable()
    # 16 MB in four files, where the guest can read it (not under /tmp, its own tmpfs): below
    # the 1 GiB guest's background writeback threshold (10 % of its memory), so its own
    # flusher leaves it alone for the 30 s before dirty data expires.
    where = TEST_ROOT / f"durable-{tmp_path.name}"
    tree = where / "tree"
    tree.mkdir(parents=True)
    for number in range(4):
        (tree / f"part{number}").write_bytes(os.urandom(4 * 2**20))
    archive = where / "tree.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tree, arcname="tree")
    shutil.rmtree(tree)
    plan = tmp_path / "plan.toml"
    plan.write_text(GUEST_PLAN.replace("ARCHIVE", str(archive)))
    scratch = TEST_ROOT / "durable-check"
    broken = tmp_path / "broken.db"
    cli(
        "run",
        str(plan),
        "--db",
        str(broken),
        "--scratch",
        str(scratch),
        "--quiet",
        env={**os.environ, "LAYERBENCH_TEST_SYNC_TOP_ONLY": "1"},
        check=True,
    )
    found = _durability(broken)
    guest = found["facts"]["guest"]
    # Its syncfs is its disk's. Not 0: a fresh clone's run read 24 KiB dirty (in the guest or
    # in the host's pages of the disk image after the guest's shutdown) against 16 MiB claimed.
    assert guest["durable"] is True and guest["dirty_bytes"] < 2**20, guest
    fuse = found["facts"]["guest-fuse"]
    assert fuse["durable"] is False and fuse["dirty_bytes"] >= 0.9 * fuse["claimed_bytes"], fuse
    said = [w for w in found["warnings"] if w.startswith("not durable: guest-fuse/untar: 1 run(s) where ")]
    assert said and "was still dirty below the stack when the run ended" in said[0], found["warnings"]
    # Without the switch, on this host: the sync reaches the disk through the FUSE layer.
    host = tmp_path / "host.toml"
    host.write_text(
        'name = "durable"\nreps = 1\nwarmup = 0\nrerun_disturbed = 0\nbaseline = "disk"\n'
        '[stacks.disk]\nlayers = []\n[stacks.fuse]\nlayers = [{ kind = "fuse" }]\n'
        f'[workloads.untar]\nkind = "extract"\narchive = "{archive}"\n'
    )
    fixed = tmp_path / "fixed.db"
    cli("run", str(host), "--db", str(fixed), "--scratch", str(scratch), "--quiet", check=True)
    assert _durability(fixed)["facts"]["fuse"]["durable"] is True
    assert not [w for w in _durability(fixed)["warnings"] if w.startswith("not durable")]
    assert leftovers(scratch) == []
    shutil.rmtree(where)


TRACED = """
name = "traced"
reps = 1
warmup = 0
rerun_disturbed = 0
baseline = "disk"
[stacks.disk]
layers = []
[stacks.image]
layers = [{ kind = "image", size = "128M" }]
[workloads.write]
kind = "stream-write"
size = "16M"
trace = "block"
"""


def test_trace_block_records_a_latency_histogram_per_device(needs_root: None, tmp_path: Path) -> None:
    from layerbench.observe import tracing

    if reason := tracing.missing():
        pytest.skip(f"cannot trace here: {reason}")
    plan = tmp_path / "plan.toml"
    plan.write_text(TRACED)
    db, scratch = tmp_path / "r.db", TEST_ROOT / "traced"
    cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", check=True)
    document = json.loads(_report(db, "json"))
    for run in document["runs"]:
        assert "trace_block" in run["facts"], run["facts"].get("trace_block_missing")
        histograms = run["facts"]["trace_block"]
        for device in run["facts"]["kernel"]["devices_top_first"]:
            buckets = histograms[device]
            assert sum(count for _, _, count in buckets) > 0, (device, histograms)
            assert all(low <= high for low, high, _ in buckets)
    assert not [w for w in document["warnings"] if "trace" in w]
    page = tmp_path / "report.html"
    page.write_text(_report(db, "html"))
    drawn, dom = drawn_figures(page, tmp_path)
    width, height = drawn["block-latency-write"]
    assert width > 300 and height > 100, dom[-2000:]
    assert leftovers(scratch) == [] and "bpftrace" not in cli_processes()


def cli_processes() -> str:
    return " ".join(p.read_text() for p in Path("/proc").glob("[0-9]*/comm") if p.exists())


def test_without_bpftrace_one_line_says_so_and_the_run_completes(needs_root: None, tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(TRACED.replace("reps = 1", "reps = 1\nsentinel = false"))
    db, scratch = tmp_path / "r.db", TEST_ROOT / "untraced"
    done = cli(
        "run",
        str(plan),
        "--db",
        str(db),
        "--scratch",
        str(scratch),
        env={**os.environ, "LAYERBENCH_BPFTRACE": "/nonexistent/bpftrace"},
    )
    assert done.returncode == 0, done.stderr
    # (The report's plan section shows the plan's own `trace = "block"` line too.)
    said = [line for line in (done.stdout + done.stderr).splitlines() if 'trace = "block" was not' in line]
    assert len(said) == 1, said
    assert "/nonexistent/bpftrace is not installed" in said[0] and "went on without it" in said[0]
    document = json.loads(_report(db, "json"))
    assert [r["status"] for r in document["runs"]] == ["ok", "ok"]
