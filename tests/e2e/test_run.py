"""The whole pipeline for real: a small plan through every layer and workload kind."""

import csv
import io
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TEST_ROOT, assert_verdict_agrees, cli, leftovers, skip_unless_root

from layerbench import stats
from layerbench.scratch import placement
from layerbench.scratch.placement import InodeGroups

pytestmark = pytest.mark.e2e

PLAN = """
name = "e2e"
reps = 4
rerun_disturbed = 0  # the run counts below are exact
warmup = 1
baseline = "disk"
seed = 7
[stacks.disk]
layers = []
[stacks.bind]
layers = [{ kind = "bind" }]
[stacks.image]
layers = [{ kind = "image", fs = "ext4", size = "256M" }]
[stacks.ram]
layers = [{ kind = "tmpfs", size = "256M" }]
[stacks.union]
layers = [{ kind = "overlay" }]
[workloads.write]
kind = "stream-write"
size = "32M"
fill = 0.25
fill_with = "allocate"
[workloads.untar]
kind = "extract"
archive = "builtin:small-tree"
[workloads.files]
kind = "metadata"
files = 500
[workloads.cmd]
kind = "command"
run = "sh -c 'cp -a /usr/include/linux . && sync -f .'"
"""


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    skip_unless_root()

    base = tmp_path_factory.mktemp("e2e")
    plan = base / "plan.toml"
    plan.write_text(PLAN)
    db = base / "results.db"
    scratch = TEST_ROOT / "e2e-run"
    done = cli("run", str(plan), "--db", str(db), "--scratch", str(scratch))
    assert done.returncode == 0, done.stderr
    return {
        "db": db,
        "scratch": scratch,
        "stdout": Path(base / "stdout.txt"),
        "plan": plan,
        "out": done.stdout,
    }  # type: ignore[dict-item]


def _report(experiment: dict[str, Path], fmt: str) -> str:
    done = cli("report", "--db", str(experiment["db"]), "--format", fmt, check=True)
    return done.stdout


def test_run_prints_the_text_report_and_leaves_nothing(experiment: dict[str, Path]) -> None:
    text = str(experiment["out"])
    for name in ("disk", "bind", "image", "ram", "union", "Workload write", "Workload cmd"):
        assert name in text
    assert leftovers(experiment["scratch"]) == []
    # The root's lock and marker stay (it is the user's directory), and on an ext4 without a
    # journal the flex groups the next run keeps away from for six minutes; nothing else does.
    kept = [".layerbench-scratch", "lock"]
    if InodeGroups(experiment["scratch"]).active:
        kept.insert(0, placement.STATE)
    assert sorted(p.name for p in experiment["scratch"].iterdir()) == kept


def test_json_has_every_summary_and_every_run(experiment: dict[str, Path]) -> None:
    document = json.loads(_report(experiment, "json"))
    assert document["experiment"]["status"] == "done"
    assert document["experiment"]["seed"] == 7
    wall = [s for s in document["summary"] if s["metric"] == "wall_s"]
    assert len(wall) == 5 * 4
    for row in wall:
        # A run other work disturbed is left out of the statistics (unless most of them were).
        flags = [
            bool(r["facts"].get("disturbed"))
            for r in document["runs"]
            if (r["stack"], r["workload"]) == (row["stack"], row["workload"]) and not r["warmup"]
        ]
        assert row["n"] == (4 if 2 * sum(flags) > len(flags) else 4 - sum(flags))
        assert row["ci_low"] <= row["median"] <= row["ci_high"]
        if row["stack"] == "disk":
            assert row["verdict"] == "baseline"
        else:
            assert row["ratio_ci_low"] <= row["ratio"] <= row["ratio_ci_high"]
            assert 0 <= row["p_value"] <= row["p_adjusted"] <= 1
            assert row["correction"] == "holm" and row["equivalence"] == stats.EQUIVALENCE and row["method"]
            # at 1 - alpha after Holm's share; an equivalent row's at 1 - 2 alpha
            assert (0.90 if row["decision"] == "equivalent" else 0.95) <= row["ratio_ci_level"] < 1
            assert row["ci_level"] == {4: 0.875, 3: 0.75, 2: 0.5}[row["n"]]  # few runs: the range
            # No row's verdict disagrees with its interval.
            assert_verdict_agrees(row)
    metrics = {s["metric"] for s in document["summary"]}
    assert {"wall_s", "cpu_pct", "majflt", "minflt", "oublock", "throughput"} <= metrics
    runs = document["runs"]
    assert len(runs) == 5 * 4 * (4 + 1)
    assert sum(r["warmup"] for r in runs) == 5 * 4
    for run in runs:
        assert run["status"] == "ok", run
        for key in (
            "wall_s",
            "user_s",
            "sys_s",
            "cpu_pct",
            "maxrss_kb",
            "minflt",
            "majflt",
            "inblock",
            "oublock",
            "nvcsw",
            "nivcsw",
            "read_bytes",
            "write_bytes",
        ):
            assert run[key] is not None and run[key] >= 0
    writes = [r for r in runs if r["workload"] == "write"]
    assert all(r["units"] == 32 * 2**20 and r["throughput"] > 0 for r in writes)
    # On a disk-backed stack the synced 32 MiB reach the device; on tmpfs no device is under.
    for run in writes:
        if run["stack"] in ("disk", "image", "bind"):
            assert run["write_bytes"] >= 32 * 2**20 * 0.9, run
        if run["stack"] == "ram":
            assert run["write_bytes"] == 0
    image = document["stacks"]["image"]
    assert image["devices"][0].startswith("loop") and "ext4" in image["mount_lines"][0]
    host = document["host"]
    assert host["cpus"] >= 1 and host["kernel"] and host["scratch_fs"]["type"]


def test_mail_has_one_csh_time_line_per_stack(experiment: dict[str, Path]) -> None:
    mail = _report(experiment, "mail")
    for block in (
        "Hardware/OS:",
        "Config image:",
        "Test:",
        "Workload write:",
        "Numbers (the run with the median",
    ):
        assert block in mail
    csh = re.compile(
        r"^(\w+): +\d+\.\d{3}u \d+\.\d{3}s \d+:\d\d\.\d\d \d+\.\d% 0\+\d+k "
        r"\d+\+\d+io \d+pf\+0w$",
        re.MULTILINE,
    )
    stacks_per_workload = [m.group(1) for m in csh.finditer(mail)]
    assert stacks_per_workload.count("disk") == 4
    assert sorted(set(stacks_per_workload)) == ["bind", "disk", "image", "ram", "union"]
    assert "loop" in mail  # the image's mount line names its loop device


def test_csv_markdown_and_text_parse(experiment: dict[str, Path]) -> None:
    rows = list(csv.DictReader(io.StringIO(_report(experiment, "csv"))))
    assert len(rows) == 100 and float(rows[0]["wall_s"]) > 0
    markdown = _report(experiment, "markdown")
    tables = [t.splitlines() for t in re.findall(r"(?:^\| .*\n)+", markdown, re.MULTILINE)]
    assert tables and all(line.count("|") == table[0].count("|") for table in tables for line in table)
    elapsed = markdown.split("**elapsed time, against disk**")[1:]
    assert len(elapsed) == 4  # a comparison per workload: header + rule + five stacks
    assert all(len(part.strip().split("\n\n")[0].splitlines()) == 2 + 5 for part in elapsed)
    text = _report(experiment, "text")
    assert "baseline" in text and "Workload files" in text


def test_report_to_a_file(experiment: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    cli("report", "--db", str(experiment["db"]), "--format", "json", "-o", str(target), check=True)
    assert json.loads(target.read_text())["experiment"]["name"] == "e2e"


def test_store_holds_plan_and_host(experiment: dict[str, Path]) -> None:
    db = sqlite3.connect(experiment["db"])
    plan_text, status, host = db.execute("SELECT plan_text, status, host_json FROM experiments").fetchone()
    assert plan_text == experiment["plan"].read_text() and status == "done"
    assert json.loads(host)["tools"]["tar"].startswith("tar")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_data_written_through_fuse_reaches_the_device_within_the_run(tmp_path: Path) -> None:
    # syncfs of a bindfs mount is a no-op: without a syncfs of the file system under it,
    # the extracted files would still be dirty in memory when the timed run ends. The
    # durability check says whether each run moved its bytes to the disk inside the run
    # (other writers of the disk can only add to what it sees).
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'name = "durable"\nreps = 1\nwarmup = 0\nbaseline = "disk"\n'
        '[stacks.disk]\nlayers = []\n[stacks.fuse]\nlayers = [{ kind = "fuse" }]\n'
        '[workloads.untar]\nkind = "extract"\narchive = "builtin:small-tree"\n'
        '[workloads.files]\nkind = "metadata"\nfiles = 300\nphases = ["create"]\n'
    )
    scratch = TEST_ROOT / "durable"
    db = tmp_path / "r.db"
    cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", check=True)
    rows = sqlite3.connect(db).execute("SELECT stack, workload, status, facts_json FROM runs").fetchall()
    facts = {(stack, workload): json.loads(text) for stack, workload, status, text in rows if status == "ok"}
    assert len(facts) == 4, rows
    for (stack, workload), fact in facts.items():
        durability = fact["durability"]
        assert durability["durable"] and durability["claimed_bytes"] > 1_000_000, (
            stack,
            workload,
            durability,
        )
    assert leftovers(scratch) == []


def test_disturbed_runs_are_kept_flagged_and_run_again(needs_root: None, tmp_path: Path) -> None:
    """Two CPU hogs beside the runs: the first disturbed measured run is stored with its
    flag and its trial runs again; the report says what was re-run."""
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'name = "hogged"\nreps = 2\nwarmup = 0\nrerun_disturbed = 2\n'
        '[stacks.ram]\nlayers = [{ kind = "tmpfs", size = "16M" }]\n'
        '[workloads.nap]\nkind = "command"\nrun = "sleep 0.4"\n'
    )
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        db = tmp_path / "r.db"
        scratch = TEST_ROOT / f"hogged-{tmp_path.name}"
        cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", check=True)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    document = json.loads(cli("report", "--db", str(db), "--format", "json", check=True).stdout)
    runs = [r for r in document["runs"] if not r["warmup"]]
    assert all(r["facts"]["disturbed"] for r in runs), [r["facts"] for r in runs]
    reruns = [r for r in runs if r["facts"].get("rerun")]
    assert reruns and len(runs) == 2 + len(reruns), [(r["rep"], r["facts"].get("rerun")) for r in runs]
    assert all(r["rep"] == 0 for r in reruns)  # the first rep was re-run; then most were flagged
    note = next(w for w in document["warnings"] if "disturbed" in w)
    assert f"{len(reruns)} re-run(s)" in note and "kept whole" in note
    # Every run of the pair was flagged: they are all in the statistics (the CPU was the hogs').
    (row,) = [s for s in document["summary"] if s["stack"] == "ram" and s["metric"] == "wall_s"]
    assert row["n"] == len(runs)


def test_the_fill_is_allocated_on_every_stack_that_can(experiment: dict[str, Path]) -> None:
    """ext4 on the disk, a bind mount of it, an ext4 image, a tmpfs and an overlay all take
    fallocate(2); the fill is stored with each run, how it was taken beside it; and every
    trial held memory warm where this kernel hands free memory back."""
    document = json.loads(_report(experiment, "json"))
    written = [r for r in document["runs"] if r["workload"] == "write" and r["status"] == "ok"]
    assert {r["stack"] for r in written} == {"disk", "bind", "image", "ram", "union"}
    for run in written:
        assert run["facts"]["fill_with"] == "allocate", run["stack"]
        assert run["facts"]["fill_bytes"] == 64 << 20  # 0.25 of the smallest fs, the 256M image
    from layerbench.observe import warm_memory

    if warm_memory.wanted():
        assert all(r["facts"]["warm_memory_bytes"] >= 32 << 20 for r in written)
        assert all(r["facts"]["phase_warm_memory_s"] >= 0 for r in document["runs"])
