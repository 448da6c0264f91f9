"""The metric registry: one entry makes a counter a column of the store, a row of the
statistics and a key of the JSON; a results file of the landed main still reports."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from layerbench import reports, stats
from layerbench.core import metrics
from layerbench.core.runs import known
from layerbench.reports import json_export
from layerbench.store import Store

FIXTURE = Path(__file__).parent / "fixtures" / "landed-main-2026-11-30.db"
# What the landed main's own `report --format json` said of that file (median per row).
LANDED_MEDIANS = {
    ("disk", "files", "wall_s"): 0.075930992999929,
    ("ram", "files", "wall_s"): 0.04170581200014567,
    ("disk", "write", "wall_s"): 0.011340192999341525,
    ("ram", "write", "wall_s"): 0.011903351999535516,
    ("disk", "files", "oublock"): 2856.0,
    ("ram", "files", "oublock"): 16.0,
    ("disk", "write", "oublock"): 16416.0,
    ("disk", "write", "majflt"): 5.0,
}


@pytest.fixture
def landed(tmp_path: Path) -> Path:
    copy = tmp_path / "landed.db"
    shutil.copy(FIXTURE, copy)
    return copy


def test_every_registered_metric_has_one_definition() -> None:
    names = [m.name for m in metrics.METRICS]
    assert len(names) == len(set(names))
    assert list(metrics.compared()) == [m.name for m in metrics.METRICS if m.compared]
    assert set(metrics.headline()) <= set(names) and "wall_s" in metrics.headline()
    # Every column is measured for every run (a field of its counters) or reported by a
    # workload (its Prepared.metrics), never both.
    from layerbench.observe.measure import RunCounters

    fields = {f.name for f in dataclasses.fields(RunCounters)}
    reported = set(metrics.reported())
    assert set(metrics.column_names()) <= fields | reported and not fields & reported


def test_a_results_file_of_the_landed_main_reports_the_same_figures(landed: Path) -> None:
    data = reports.gather(Store(landed), 1)
    assert len(data.runs) == 16 and data.experiment.status == "done"
    everything = stats.measured(data.runs, disturbed=True)
    for (stack, workload, metric), median in LANDED_MEDIANS.items():
        values = sorted(known(everything[(stack, workload)], metric))
        assert values[len(values) // 2] == pytest.approx(median), (stack, workload, metric)
        # Today's statistics leave a run flagged disturbed out (see docs/statistics.md).
        if not any(stats.is_disturbed(r) for r in everything[(stack, workload)]):
            assert data.median(stack, workload, metric) == pytest.approx(median), (stack, workload, metric)
    document = json.loads(reports.render(data, "json"))
    assert document["schema_version"] == json_export.SCHEMA_VERSION
    assert all(row["decision"] for row in document["summary"])


def test_a_counter_added_to_the_registry_reaches_store_statistics_and_json(
    landed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = metrics.Metric("pressure_io_s", "time stalled on I/O", "s", better="lower", explains=True)
    registry = (*metrics.METRICS, counter)
    monkeypatch.setattr(metrics, "METRICS", registry)
    monkeypatch.setattr(metrics, "BY_NAME", {m.name: m for m in registry})
    store = Store(landed)  # the old file gains the column, empty for its old runs
    experiment = store.create_experiment(
        name="x",
        plan_source="p",
        plan_text="",
        plan={"stacks": {"a": [], "b": []}, "workloads": {"w": {"kind": "command"}}},
        seed=1,
        baseline="a",
        host={},
        version="test",
        warnings=[],
    )
    for rep in range(6):
        for stack, stall in (("a", 0.10), ("b", 0.30)):
            run = {
                "trial": 2 * rep + (stack == "b"),
                "stack": stack,
                "workload": "w",
                "rep": rep,
                "warmup": 0,
                "status": "ok",
                "error": None,
                "exit_code": 0,
                "started": "now",
                "wall_s": 1.0 + stall,
                "pressure_io_s": stall * (1 + rep / 100),
            }
            store.add_run_row(experiment, run, {}, {}, [])
    data = reports.gather(store, experiment)
    assert data.runs[0].value("pressure_io_s") == pytest.approx(0.10)
    row = data.summary("b", "w", "pressure_io_s")
    assert row is not None and row.ratio == pytest.approx(3.0, rel=0.01) and row.decision == "slower"
    document = json.loads(reports.render(data, "json"))
    assert "pressure_io_s" in document["runs"][0]
    assert any(r["metric"] == "pressure_io_s" for r in document["summary"])
    old = reports.gather(store, 1)  # the landed runs: no figure, no error
    assert old.summary("ram", "files", "pressure_io_s").n == 0  # type: ignore[union-attr]
    assert stats.Design.of_plan(old.experiment.plan).correction == "holm"
