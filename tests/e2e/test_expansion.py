"""A sweep of three values and an incremental stack of three layers, for real: expanded by
`check`, run, and reported in every format with the sweep's plot and each layer's step."""

import json
import re
from pathlib import Path

import pytest
from helpers import TEST_ROOT, cli, drawn_figures, leftovers, skip_unless_root

from layerbench import stats
from layerbench.core.runs import RunRecord

pytestmark = pytest.mark.e2e

PLAN = """
name = "expansion"
reps = 3
warmup = 0
rerun_disturbed = 0
baseline = "dir"
[stacks.dir]
layers = []
[stacks.img]
layers = [{ kind = "image", size = "320M" }]
sweep = { "layers.0.fs" = ["ext4", "xfs", "btrfs"] }
[stacks.box]
layers = [{ kind = "tmpfs", size = "64M" }, { kind = "overlay" }, { kind = "fuse" }]
incremental = true
[workloads.write]
kind = "stream-write"
size = "8M"
"""
SWEPT = ["img[fs=ext4]", "img[fs=xfs]", "img[fs=btrfs]"]
STEPS = [("tmpfs", "dir", "tmpfs"), ("tmpfs+overlay", "tmpfs", "overlay"), ("box", "tmpfs+overlay", "fuse")]


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    skip_unless_root()
    work = tmp_path_factory.mktemp("expansion")
    plan, db, scratch = work / "plan.toml", work / "r.db", TEST_ROOT / "expansion"
    plan.write_text(PLAN)
    checked = cli("check", str(plan), check=True).stdout.splitlines()
    assert "7 stacks x 1 workloads" in checked[0], checked
    assert checked[1:] == [
        f"  sweep img over layers.0.fs: {', '.join(SWEPT)}",
        "  incremental box: dir -> tmpfs -> tmpfs+overlay -> box "
        "(tmpfs adds tmpfs, tmpfs+overlay adds overlay, box adds fuse)",
    ]
    cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", check=True)
    assert leftovers(scratch) == []
    return db


def _report(db: Path, fmt: str) -> str:
    return cli("report", "--db", str(db), "--format", fmt, check=True).stdout


def test_every_expanded_stack_ran_and_json_has_the_sweep_and_the_steps(experiment: Path) -> None:
    document = json.loads(_report(experiment, "json"))
    assert document["schema_version"] == 6
    runs = document["runs"]
    assert all(r["status"] == "ok" for r in runs), [r["error"] for r in runs]
    assert {r["stack"] for r in runs} == {"dir", *SWEPT, "tmpfs", "tmpfs+overlay", "box"}
    assert [info["layers"] for name, info in document["stacks"].items() if name == "tmpfs+overlay"] == [
        ["tmpfs(size=64M)", "overlay"]
    ]
    (sweep,) = document["sweeps"]
    assert sweep["group"] == "img" and sweep["paths"] == {"fs": "layers.0.fs"}
    assert [(p["stack"], p["values"]) for p in sweep["points"]] == [
        (name, {"fs": fs}) for name, fs in zip(SWEPT, ("ext4", "xfs", "btrfs"), strict=True)
    ]
    steps = [m for m in document["marginal"] if m["metric"] == "wall_s"]
    assert [(m["stack"], m["previous"], m["layer"]) for m in steps] == STEPS
    # A run other work disturbed is left out, as in every comparison.
    kept = stats.measured([RunRecord.from_row(run) for run in runs])
    for step in steps:
        assert step["n"] == len(kept[(step["stack"], "write")]) >= 2, step
        assert step["ratio_ci_low"] <= step["ratio"] <= step["ratio_ci_high"], step
        assert 0.9 < step["ratio_ci_level"] < 1 and step["decision"] != "insufficient data"
    fuse = next(m for m in steps if m["layer"] == "fuse")
    medians = {row["stack"]: row["median"] for row in document["summary"] if row["metric"] == "wall_s"}
    assert fuse["median_ratio"] == pytest.approx(medians["box"] / medians["tmpfs+overlay"])


def test_text_markdown_mail_and_html_group_the_sweep_and_show_each_layer(
    experiment: Path, tmp_path: Path
) -> None:
    text = _report(experiment, "text")
    assert "img[fs=xfs]" in text and "img over fs: ext4 x" in text  # names survive the terminal
    assert "What each layer adds" in text and "image+overlay" not in text
    for fmt in ("markdown", "mail"):
        shown = _report(experiment, fmt)
        assert "What each layer adds" in shown
        assert re.search(r"box\W+fuse\W+tmpfs\+overlay\W+x\d", shown), shown
        assert "img over fs: ext4 x" in shown
    page = tmp_path / "report.html"
    page.write_text(_report(experiment, "html"))
    drawn, dom = drawn_figures(page, tmp_path)
    width, height = drawn["sweep-img"]
    assert width > 300 and height > 100, dom[-2000:]
    assert "What each layer adds" in page.read_text()


def test_a_swept_btrfs_compression_and_ext4_data_mode_reach_the_mounts(
    needs_root: None, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'name = "options"\nreps = 1\nwarmup = 0\nrerun_disturbed = 0\nsettle = 0\nsentinel = false\n'
        '[stacks.btrfs]\nlayers = [{ kind = "image", fs = "btrfs", size = "128M" }]\n'
        'sweep = { "layers.0.compress" = ["lzo", "zstd:3"] }\n'
        '[stacks.ext4]\nlayers = [{ kind = "image", data = "writeback", journal = true }]\n'
        '[workloads.write]\nkind = "stream-write"\nsize = "4M"\n'
    )
    db, scratch = tmp_path / "r.db", TEST_ROOT / "image-options"
    cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", check=True)
    stacks = json.loads(_report(db, "json"))["stacks"]
    lines = {name: " ".join(info["mount_lines"]) for name, info in stacks.items()}
    assert "compress=lzo" in lines["btrfs[compress=lzo]"], lines
    assert "compress=zstd:3" in lines["btrfs[compress=zstd:3]"], lines
    assert "data=writeback" in lines["ext4"], lines
    assert leftovers(scratch) == []
