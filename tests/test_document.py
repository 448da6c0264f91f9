"""The report document (reports/document.py, built by reports/contents.py): every human
format shows the same sections, tables and lines; the terminal's rows stay on one line; a
fio workload leads with its own figures; a read job gets no written-bytes flow."""

import html
import math
import random
import re
from pathlib import Path

import pytest

from layerbench import reports
from layerbench.executors.fake import FakeExecutor
from layerbench.experiment import Experiment
from layerbench.plan import parse_plan
from layerbench.plan.schedule import Trial
from layerbench.reports import contents, document
from layerbench.reports.document import Figure, Lines, Table
from layerbench.store import Store

DEFAULT_PLAN = (Path(__file__).parent.parent / "layerbench" / "plan" / "default.toml").read_text()
HUMAN = ("text", "markdown", "mail", "html")
COST = {"disk": 1.0, "bind": 1.01, "image": 1.3, "tmpfs": 0.6}


def _default_script(trial: Trial) -> dict[str, object]:
    noise = random.Random(trial.index).gauss(0, 0.08)  # wide: some comparisons stay open
    return {
        "wall_s": COST[trial.stack] * math.exp(noise),
        "user_s": 0.1,
        "sys_s": 0.5,
        "cpu_pct": 60.0,
        "minflt": 1000,
        "units": 2**30,
        "unit": "bytes",
    }


@pytest.fixture(scope="module")
def default_data(tmp_path_factory: pytest.TempPathFactory) -> reports.ReportData:
    """The default experiment, scripted: 4 stacks x 3 workloads, no budget (the fake runs
    take no time, so the budget's looks would run to the cap)."""
    store = Store(tmp_path_factory.mktemp("doc") / "r.db")
    plan = parse_plan(DEFAULT_PLAN.replace('budget = "8m"', 'budget = "off"'), "builtin:default")
    experiment = Experiment(plan, store, FakeExecutor(_default_script), seed=7)
    experiment.prepare([])
    experiment.run()
    return reports.gather(store, 1)


def _plain(text: str, page: bool = False) -> str:
    """Words only: a page's tags and entities out, markdown's escaped bars back."""
    if page:
        text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    return " ".join(text.replace("\\|", "|").split())


def test_every_format_shows_every_section_table_and_line_of_the_default_experiment(
    default_data: reports.ReportData,
) -> None:
    built = contents.document(default_data)
    titles = [section.title for section in built.sections]
    assert titles[:2] == ["Hardware/OS", "Cost of each stack against the baseline"]
    assert [t for t in titles if t.startswith("Workload ")] == [
        "Workload extract",
        "Workload stream-write",
        "Workload metadata",
    ]
    assert {"Stacks", "Test", "During the runs", "Warnings", "The plan"} <= set(titles)
    for name in HUMAN:
        page = reports.render(default_data, name)
        shown = _plain(page, name == "html")
        for section in built.sections:
            assert section.title in shown, (name, section.title)
            for block in section.blocks:
                if isinstance(block, Table):
                    assert _plain(block.title) in shown, (name, block.title)
                    for row in block.texts():
                        for cell in row:
                            assert _plain(cell) in shown, (name, section.title, cell)
                    for note in block.notes:
                        assert _plain(note) in shown, (name, note)
                elif isinstance(block, Lines):
                    for line in block.lines:
                        assert _plain(line) in shown, (name, line)
                elif isinstance(block, Figure):
                    # Drawn in html, named in the others.
                    assert (f'id="{block.name}"' in page) if name == "html" else (block.title in shown)


def test_the_terminal_table_keeps_a_row_to_one_line_and_the_verdict_to_a_word(
    default_data: reports.ReportData,
) -> None:
    text = reports.render(default_data, "text")
    table_lines = [line for line in text.splitlines() if line[:1] and line[:1] in "┃│┏┡└"]
    assert table_lines and max(len(line) for line in table_lines) <= 100
    built = contents.document(default_data)
    for workload in default_data.workloads:
        table = contents.comparison_table(default_data, workload, "wall_s")
        assert table is not None
        for row in table.rows:
            stack, ratio, verdict = row[0].text, row[2].text, row[3].text
            assert " " not in verdict or verdict == "no successful runs"
            assert any(stack in line and ratio in line and verdict in line for line in text.splitlines()), row
    notes = [n for s in built.sections for b in s.blocks if isinstance(b, Table) for n in b.notes]
    assert any("inconclusive: [" in note for note in notes), "the scripted noise leaves one open"


def _fio_data(tmp_path: Path, job: str) -> reports.ReportData:
    plan = f"""
name = "fio-doc"
reps = 5
warmup = 0
baseline = "disk"
[stacks.disk]
layers = []
[stacks.tmpfs]
layers = [{{ kind = "tmpfs", size = "1G" }}]
[workloads.job]
kind = "fio"
options = {{ rw = "{job}", bs = "4k", size = "16M" }}
"""

    def script(trial: Trial) -> dict[str, object]:
        faster = 2.0 if trial.stack == "tmpfs" else 1.0
        jitter = math.exp(random.Random(trial.index).gauss(0, 0.02))
        values: dict[str, object] = {"wall_s": jitter / faster, "units": 16 * 2**20, "unit": "bytes"}
        values |= {"read_iops": 4096 * faster * jitter, "read_clat_p99_ns": 9000 / faster * jitter}
        values |= {"read_io_bytes": 16 * 2**20, "fio_runtime_s": jitter / faster}
        return values

    store = Store(tmp_path / "r.db")
    experiment = Experiment(parse_plan(plan, "fio-doc.toml"), store, FakeExecutor(script), seed=1)
    experiment.prepare([])
    experiment.run()
    return reports.gather(store, 1)


def test_a_fio_workload_leads_with_its_iops_and_latency_then_elapsed_time(tmp_path: Path) -> None:
    data = _fio_data(tmp_path, "randread")
    (section,) = [s for s in contents.document(data).sections if s.title == "Workload job"]
    tables = [b.title for b in section.blocks if isinstance(b, Table)]
    assert tables[:3] == [
        "read IOPS, against disk",
        "read completion latency p99, against disk",
        "elapsed time, against disk",
    ], tables
    iops = contents.comparison_table(data, "job", "read_iops")
    assert iops is not None
    tmpfs = next(row for row in iops.rows if row[0].text == "tmpfs")
    assert tmpfs[3].text == "faster" and tmpfs[2].text.startswith("x2.0")
    # A read job: no table of written bytes (it wrote none: x0.00 would mean nothing).
    assert not any(b.title.startswith("Bytes written") for b in section.blocks if isinstance(b, Table))


def test_one_registry_holds_every_format_with_the_kinds_it_renders() -> None:
    assert document.load_formats("experiment") == ["csv", "html", "json", "mail", "markdown", "text"]
    assert document.load_formats("comparison") == ["html", "json", "mail", "markdown", "text"]
    assert document.load_formats("history") == ["html", "json", "mail", "markdown", "text"]


def test_a_stack_given_fewer_rounds_says_which_baseline_runs_its_ratio_is_against(tmp_path: Path) -> None:
    """With a budget, decided stacks stop while the baseline goes on with the undecided ones:
    a stack's table note gives the baseline's median over the repetitions it was paired with."""
    store = Store(tmp_path / "r.db")
    plan = parse_plan(DEFAULT_PLAN, "builtin:default")
    experiment = Experiment(plan, store, FakeExecutor(_default_script), seed=7)
    experiment.prepare([])
    experiment.run()
    data = reports.gather(store, 1)
    table = contents.comparison_table(data, "extract", "wall_s")
    assert table is not None
    tmpfs, base = data.summary("tmpfs", "extract", "wall_s"), data.summary("disk", "extract", "wall_s")
    assert tmpfs is not None and base is not None and tmpfs.n < base.n, (tmpfs, base)
    said = [n for n in table.notes if "repetitions, against disk's runs of the same repetitions" in n]
    assert said and "tmpfs" in said[0].split(":")[0], table.notes
    assert f"all {base.n} disk runs" in said[0]
