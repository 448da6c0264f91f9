"""Every new format, produced from a real small experiment and parsed back: JSON with
samples, CSV of runs and of samples, HTML (rendered in headless Chromium), compare in all
its formats, history."""

import csv
import io
import json
import re
import shutil
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    TEST_ROOT,
    assert_verdict_agrees,
    chromium,
    cli,
    drawn_figures,
    one_line_error,
    skip_unless_root,
)

pytestmark = pytest.mark.e2e

PLAN = """
name = "reports"
reps = 4
rerun_disturbed = 0  # the run counts below are exact
warmup = 1
baseline = "disk"
seed = 11
[stacks.disk]
layers = []
[stacks.image]
layers = [{ kind = "image", fs = "ext4", size = "256M" }]
[stacks.ram]
layers = [{ kind = "tmpfs", size = "256M" }]
[workloads.write]
kind = "stream-write"
size = "96M"
[workloads.files]
kind = "metadata"
files = 400
"""
STACKS = ("disk", "image", "ram")
WORKLOADS = ("write", "files")
RUNS = len(STACKS) * len(WORKLOADS) * (4 + 1)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    skip_unless_root()
    base = tmp_path_factory.mktemp("reports")
    (base / "plan.toml").write_text(PLAN)
    path = base / "results.db"
    # Two experiments of one plan in one file: compare and history have something to show.
    for _ in range(2):
        cli(
            "run",
            str(base / "plan.toml"),
            "--db",
            str(path),
            "--scratch",
            str(TEST_ROOT / "reports-run"),
            "--quiet",
            check=True,
        )
    return path


def report(db: Path, *args: str) -> str:
    return cli("report", "--db", str(db), *args, check=True).stdout


@pytest.fixture(scope="module")
def document(db: Path) -> dict:
    return json.loads(report(db, "--format", "json"))


def test_json_schema_2_carries_each_runs_samples(document: dict) -> None:
    assert document["schema_version"] == 6
    runs = document["runs"]
    assert len(runs) == RUNS
    for run in runs:
        samples = run["samples"]
        assert samples, run
        # The series spans the run: its last sample ends at (or just after) the run's end.
        assert samples[-1]["t_s"] >= run["wall_s"] * 0.9
        assert [s["t_s"] for s in samples] == sorted(s["t_s"] for s in samples)
        cost = run["facts"]["sampler"]
        assert cost["count"] == len(samples) and cost["cpu_s"] >= 0
    disk_writes = [r for r in runs if r["stack"] == "disk" and r["workload"] == "write"]
    for run in disk_writes:
        # The samples add up to the run's own device counter (the same device and interval).
        total = sum(s["write_bytes"] for s in run["samples"])
        assert total >= 96 * 2**20 * 0.9
        assert abs(total - run["write_bytes"]) <= 0.05 * run["write_bytes"] + 2**20
    for run in (r for r in runs if r["stack"] == "ram"):
        assert sum(s["write_bytes"] for s in run["samples"]) == 0  # no device under a tmpfs


def test_csv_of_runs_and_of_samples(db: Path, document: dict) -> None:
    runs = list(csv.DictReader(io.StringIO(report(db, "--format", "csv"))))
    assert len(runs) == RUNS and all(float(r["wall_s"]) > 0 for r in runs)
    samples = list(csv.DictReader(io.StringIO(report(db, "--format", "csv", "--what", "samples"))))
    assert len(samples) == sum(len(r["samples"]) for r in document["runs"])
    assert {s["stack"] for s in samples} == set(STACKS)
    first = samples[0]
    assert set(first) >= {
        "trial",
        "stack",
        "workload",
        "rep",
        "warmup",
        "t_s",
        "dt_s",
        "write_bytes",
        "disk_write_bytes",
        "cpu_busy_pct",
        "cpu_iowait_pct",
    }
    assert 0 <= float(first["cpu_busy_pct"]) <= 100


def test_samples_need_csv(db: Path) -> None:
    line = one_line_error(cli("report", "--db", str(db), "--format", "json", "--what", "samples"))
    assert "--what samples" in line


class _Figures(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, int] = {}  # figure id -> number of <svg> inside
        self.headings: list[str] = []
        self._current: str | None = None
        self._in_heading = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "div" and attributes.get("class") == "figure":
            self._current = attributes.get("id")
            self.figures[self._current or ""] = 0
        if tag == "svg" and self._current:
            self.figures[self._current] += 1
            self._current = None
        self._in_heading = tag in ("h2", "h3")

    def handle_data(self, data: str) -> None:
        if self._in_heading and data.strip():
            self.headings.append(data.strip())
            self._in_heading = False


def test_html_is_one_self_contained_page(db: Path, document: dict, tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    cli("report", "--db", str(db), "--format", "html", "-o", str(target), check=True)
    page = target.read_text()
    parser = _Figures()
    parser.feed(page)
    expected = {"ratio-plot", "runs-plot", "sentinel-plot", "settle-plot", *(f"series-{s}" for s in STACKS)}
    expected |= {f"split-{w}" for w in WORKLOADS}  # where the elapsed time went (kernel threads' CPU)
    assert set(parser.figures) == expected and all(parser.figures.values())
    for heading in (
        "Hardware/OS",
        "Stacks",
        "Warnings",
        "The plan",
        "During the runs",
        "The host during the experiment",
    ):
        assert heading in parser.headings
    # Nothing is fetched: no external script, stylesheet, image or font.
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "/dev/loop" in page  # the image stack's mount line
    assert 'kind = "stream-write"' in unescape(page)  # the plan
    significant = [
        r for r in document["summary"] if r["metric"] == "wall_s" and r["decision"] in ("slower", "faster")
    ]
    # The "why" read-out stands under a workload's table when some stack differs significantly.
    assert ('<p class="title">Why</p>' in page) == bool(significant)


def test_html_renders_in_chromium_with_its_plots(db: Path, tmp_path: Path) -> None:
    if shutil.which("chromium") is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from PIL import Image

    TEST_ROOT.mkdir(parents=True, exist_ok=True)
    target = tmp_path / "report.html"
    cli("report", "--db", str(db), "--format", "html", "-o", str(target), check=True)
    # Ask the rendered page itself how large each plot is drawn.
    drawn, dom = drawn_figures(target, tmp_path)
    expected = {"ratio-plot", "runs-plot", "sentinel-plot", "settle-plot", *(f"series-{s}" for s in STACKS)}
    expected |= {f"split-{w}" for w in WORKLOADS}
    assert set(drawn) == expected, dom[-2000:]
    for name, (width, height) in drawn.items():
        assert width > 300 and height > 100, (name, width, height)
    shot = tmp_path / "report.png"
    done = chromium("--window-size=1280,4200", f"--screenshot={shot}", f"file://{target}")
    assert shot.exists(), done.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 4200)
    pixels = np.asarray(image, dtype=int)
    inked = float((pixels.sum(axis=2) < 600).mean())
    assert inked > 0.01, f"the page looks blank ({inked:.2%} of pixels not white)"
    # The plots draw in colour (the significance red, the throughput and CPU lines): text does not.
    coloured = int(((pixels.max(axis=2) - pixels.min(axis=2)) > 60).sum())
    assert coloured > 2000, coloured


def _kept(db: Path, experiment: int) -> dict:
    """The runs the statistics keep, per (stack, workload)."""
    from layerbench import stats
    from layerbench.store import Store

    store = Store(db)
    try:
        return stats.measured(store.runs(experiment))
    finally:
        store.close()


def test_compare_in_every_format(db: Path, tmp_path: Path) -> None:
    text = cli("compare", "1", "2", "--db", str(db), check=True).stdout
    assert "B/A [CI, level]" in text and "Host differences" in text
    document = json.loads(cli("compare", "1", "2", "--db", str(db), "--format", "json", check=True).stdout)
    assert document["a"]["id"] == 1 and document["b"]["id"] == 2
    rows = document["rows"]
    assert {(r["stack"], r["workload"]) for r in rows} == {(s, w) for s in STACKS for w in WORKLOADS}
    kept = _kept(db, 2)
    for row in rows:
        # 4 repetitions, less any run other work disturbed (out of the statistics)
        assert row["n"] == len(kept[(row["stack"], row["workload"])])
        assert row["ratio_ci_low"] <= row["ratio"] <= row["ratio_ci_high"]
        assert row["decision"] in ("slower", "faster", "equivalent", "inconclusive", "undecidable")
        assert_verdict_agrees(row)
    # One host, one plan: no differences but the ones that change between runs anyway.
    assert not document["plans_differ"]
    assert all(d["key"] != "cpu_model" for d in document["host_differences"])
    markdown = cli("compare", "1", "2", "--db", str(db), "--format", "markdown", check=True).stdout
    table = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert len(table) >= 2 + len(rows)
    assert all(line.count("|") == table[0].count("|") for line in table[: 2 + len(rows)])
    # --db-b: B from another file.
    other = tmp_path / "other.db"
    shutil.copy(db, other)
    html = cli(
        "compare", "1", "2", "--db", str(db), "--db-b", str(other), "--format", "html", check=True
    ).stdout
    parser = _Figures()
    parser.feed(html)
    assert parser.figures["ratio-plot"] == 1 and "Host differences" in parser.headings
    assert "Relative cost, B against A" in parser.headings
    assert str(other) in html


def test_json_has_the_settle_wait_of_every_run_and_the_sentinel(document: dict) -> None:
    timeout = document["experiment"]["plan"].get("settle_timeout", 10.0)
    for run in document["runs"]:
        facts = run["facts"]
        assert 0 <= facts["settle_busy_s"] <= facts["settle_waited_s"], facts
        # The polling stops at the timeout, counted from the wait's start, which includes
        # its sync; a sync is never cut short (beside the flake hunt's neighbour a wait read
        # 10 s or more, against a bound of 10). So: the later of the two, plus a poll and the scheduling
        # delay of a loaded 2-CPU machine (1 s, far above the 20 ms poll).
        bound = max(facts["settle_sync_s"], timeout) + 1.0
        assert 0 <= facts["settle_sync_s"] <= facts["settle_waited_s"] <= bound, facts
        assert facts["settle_timed_out"] in (False, True)
    probes = document["sentinels"]
    assert len(probes) >= 2 and probes[0]["after_trial"] is None
    assert [p["seq"] for p in probes] == list(range(len(probes)))
    for probe in probes:
        assert set(probe["parts"]) == {"cpu", "memory", "scratch_fs", "device"}
        assert all(0 < v < 5 for v in probe["parts"].values())
    assert isinstance(document["drift"], list)


def test_compare_relative_costs_and_drift(db: Path) -> None:
    """The same plan twice on one host: relative rows for every non-baseline pair, whose
    verdicts agree with their intervals; a drift verdict from the two sentinels; the text
    says first whether the host moved."""
    document = json.loads(cli("compare", "1", "2", "--db", str(db), "--format", "json", check=True).stdout)
    assert document["schema_version"] == 2
    relative = document["relative"]
    assert {(r["stack"], r["workload"]) for r in relative} == {
        (s, w) for s in STACKS if s != "disk" for w in WORKLOADS
    }
    kept = _kept(db, 2)
    for row in relative:
        # The rounds where both the stack and the baseline kept a run.
        reps = {r.rep for r in kept[(row["stack"], row["workload"])]}
        assert row["n"] == len(reps & {r.rep for r in kept[("disk", row["workload"])]})
        assert_verdict_agrees(row)
    drift = document["drift"]
    if drift["sentinel_compared"]:  # a short experiment keeps few probes within its budget
        assert {m["part"] for m in drift["sentinel"]} == {"cpu", "memory", "scratch_fs", "device"}
    assert drift["host_changed"] == bool(drift["line"])
    agree = document["relative_agree"]
    assert agree["compared"] == len(relative) and 0 <= agree["agree"] <= agree["compared"]
    # After the title (which may wrap), before any table: whether the host moved.
    text = cli("compare", "1", "2", "--db", str(db), check=True).stdout
    said = [line for line in text.splitlines() if line.startswith(("host changed: ", "host steady: "))]
    assert len(said) == 1 and text.index(said[0]) < text.index("Relative cost, B against A")


def test_compare_shows_host_differences(db: Path, tmp_path: Path) -> None:
    import sqlite3

    other = tmp_path / "kernel.db"
    shutil.copy(db, other)
    with sqlite3.connect(other) as connection:
        host = json.loads(connection.execute("SELECT host_json FROM experiments WHERE id = 2").fetchone()[0])
        host["kernel"] = "Linux 9.9.9-other"
        connection.execute("UPDATE experiments SET host_json = ? WHERE id = 2", (json.dumps(host),))
    document = json.loads(
        cli("compare", "1", "2", "--db", str(db), "--db-b", str(other), "--format", "json", check=True).stdout
    )
    kernel = [d for d in document["host_differences"] if d["key"] == "kernel"]
    assert kernel and kernel[0]["b"] == "Linux 9.9.9-other" and kernel[0]["a"] != kernel[0]["b"]
    text = cli("compare", "1", "2", "--db", str(db), "--db-b", str(other), check=True).stdout
    assert "Linux 9.9.9-other" in text


def test_compare_and_history_bad_input(db: Path, tmp_path: Path) -> None:
    assert "no experiment 99" in one_line_error(cli("compare", "1", "99", "--db", str(db)))
    assert "no results database" in one_line_error(cli("history", "--db", str(tmp_path / "none.db")))


def test_history_lists_every_experiment(db: Path) -> None:
    document = json.loads(cli("history", "--db", str(db), "--format", "json", check=True).stdout)
    experiments = document["experiments"]
    assert [e["id"] for e in experiments] == [1, 2]
    for experiment in experiments:
        assert experiment["name"] == "reports" and experiment["status"] == "done"
        assert experiment["stacks"] == list(STACKS) and experiment["workloads"] == list(WORKLOADS)
        assert experiment["runs"] == RUNS and experiment["host"]
    text = cli("history", "--db", str(db), check=True).stdout
    assert re.search(r"\b2 +│ reports", text) and "disk, image, ram" in text


def _without_volatile(text: str) -> str:
    """A page without what differs from one rendering to the next: each SVG's metadata (the
    time it was drawn) and the ids matplotlib salts at random."""
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    return re.sub(r'(\bid="|url\(#|href="#)[^")]+', r"\1ID", text)


def test_a_command_in_a_process_of_its_own_prints_what_the_tests_read_in_theirs(db: Path) -> None:
    """The tests run the commands that only read through the CLI's main() in their own
    process (tests/helpers.py); a user's command is a process of its own, which imports only
    what that command needs: every format of report, compare and history come out the same."""
    commands = [("report", "--format", form) for form in ("text", "markdown", "mail", "json", "csv", "html")]
    commands += [("compare", "1", "2", "--format", "text"), ("history", "--format", "json")]
    for command in commands:
        alone = cli(*command, "--db", str(db), separate=True, check=True)
        here = cli(*command, "--db", str(db), check=True)
        assert _without_volatile(alone.stdout) == _without_volatile(here.stdout), command
        assert alone.stderr == here.stderr, command
