import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest
from helpers import new_experiment, run_row
from sqlalchemy import text

from layerbench.core.errors import UserError
from layerbench.observe.sampling import Sample as SamplerSample
from layerbench.store import SAMPLE_COLUMNS, SampleRecord, Store


def _experiment(store: Store) -> int:
    return new_experiment(store, plan_text="name='t'", host={"cpus": 2})


def test_runs_round_trip(store_location: str) -> None:
    store = Store(store_location)
    ident = _experiment(store)
    run = run_row()
    store.add_run_row(ident, run, {"vda": {"write_bytes": 5}}, {"fill_bytes": 7})
    (stored,) = store.runs(ident)
    assert stored.devices == {"vda": {"write_bytes": 5}} and stored.facts == {"fill_bytes": 7}
    assert stored.warmup is False and stored.wall_s == 1 and stored.experiment_id == ident
    store.set_stack_info(ident, "a", {"layers": ["bind"]})
    store.add_warning(ident, "noisy")
    store.add_warning(ident, "noisy")
    record = store.experiment(ident)
    assert record.stacks["a"].layers == ["bind"] and record.warnings == ["noisy"]
    assert store.latest_experiment_id() == ident


def test_the_state_moves_with_every_change_the_history_shows(store_location: str) -> None:
    """The browser keeps the history while the state stays: a new experiment, a stored run,
    an experiment's end and a status marked each move it; reading moves nothing."""
    store = Store(store_location)
    seen = [store.state()]
    ident = _experiment(store)
    seen.append(store.state())
    store.add_run_row(ident, run_row(), {}, {})
    seen.append(store.state())
    store.history()
    assert store.state() == seen[-1]
    store.finish_experiment(ident, "done")
    seen.append(store.state())
    other = _experiment(store)
    with store.engine.begin() as connection:  # its process is gone
        connection.execute(text("UPDATE experiments SET pid = 2147483647 WHERE id = :id"), {"id": other})
    seen.append(store.state())
    assert store.mark_running_interrupted() == [other]
    seen.append(store.state())
    assert len(set(seen)) == len(seen), seen


def test_killed_experiments_are_marked_interrupted(store_location: str) -> None:
    store = Store(store_location)
    ident = _experiment(store)
    assert store.mark_running_interrupted() == []  # our own pid is alive
    with store.engine.begin() as connection:  # no such process
        connection.execute(text("UPDATE experiments SET pid = 2147483647"))
    assert store.mark_running_interrupted() == [ident]
    assert store.experiment(ident).status == "interrupted"


def test_a_running_experiment_of_another_machine_is_left_alone(store_location: str) -> None:
    """A shared database holds the running experiments of other machines: their pids mean
    nothing here, so a run or clean on this machine must not mark them interrupted."""
    store = Store(store_location)
    ident = _experiment(store)
    with store.engine.begin() as connection:
        connection.execute(text("UPDATE experiments SET pid = 2147483647, owner = 'elsewhere'"))
    assert store.mark_running_interrupted() == []
    assert store.experiment(ident).status == "running"


def test_samples_sentinels_facts_and_reasons_round_trip(store_location: str) -> None:
    from layerbench.observe.sentinel import Sample

    store = Store(store_location)
    ident = _experiment(store)
    run = run_row(fill=3, warmup=1)
    run["write_bytes"] = 5 * 2**40  # more than a 32-bit integer holds
    series = [{"t_s": 0.1 * i, "dt_s": 0.1, "write_bytes": 2**33 + i} for i in range(3)]
    store.add_run_row(ident, run, {}, {}, series)
    store.add_sentinel(ident, Sample(0, "t0", None, {"cpu": 0.5}, 0.1))
    store.add_sentinel(ident, Sample(0, "t1", 0, {"cpu": 0.6}, 0.2))  # the same probe again: replaced
    store.set_experiment_fact(ident, "reps", {"a": 5})
    store.set_experiment_fact(ident, "reps", {"a": 7})
    store.finish_experiment(ident, "interrupted", "host lost")
    (stored,) = store.runs(ident)
    assert stored.value("write_bytes") == 5 * 2**40 and stored.warmup is True
    (samples,) = store.samples(ident).values()
    assert [s.write_bytes for s in samples] == [2**33, 2**33 + 1, 2**33 + 2]
    assert samples[0].dirty_bytes is None  # not written: None, never 0
    (probe,) = store.sentinels(ident)
    assert probe.parts == {"cpu": 0.6} and probe.after_trial == 0
    record = store.experiment(ident)
    assert record.facts == {"reps": {"a": 7}}
    assert (record.status, record.status_reason) == ("interrupted", "host lost")
    store.reopen_experiment(ident)
    assert store.experiment(ident).status_reason is None
    (entry,) = store.history()
    assert entry.runs == 1 and entry.stacks == []


def test_missing_experiment_and_corrupt_file(tmp_path: Path, store_location: str) -> None:
    store = Store(store_location)
    with pytest.raises(UserError, match="no experiment 9"):
        store.experiment(9)
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(UserError, match=r"bad\.db"):
        Store(bad)


WRITER = """
import sys
from pathlib import Path
from layerbench.store import Store, run_columns
store = Store(Path(sys.argv[1]))
ident = store.create_experiment(name="t", plan_source="p", plan_text="x" * 10000, plan={}, seed=1,
    baseline="a", host={}, version="0", warnings=[])
run = dict.fromkeys(run_columns(), 1.5) | {"stack": "a", "workload": "w", "status": "ok", "error": "e" * 500,
    "unit": "bytes", "started": "now", "warmup": 0}
print("ready", flush=True)
while True:
    store.add_run_row(ident, run, {"vda": {"write_bytes": 1}}, {"pad": "p" * 2000})
"""


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.9])
def test_wal_database_survives_kill_9_during_writes(tmp_path: Path, delay: float) -> None:
    db = tmp_path / "r.db"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    time.sleep(delay)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    connection = sqlite3.connect(db)
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert connection.execute("SELECT count(*) FROM runs").fetchone()[0] > 0


def test_a_file_from_a_newer_layerbench_is_refused_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    Store(path).close()
    connection = sqlite3.connect(path)
    connection.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    connection.commit()
    connection.close()
    with pytest.raises(UserError, match=r"written by a newer layerbench \(schema 99"):
        Store(path)


def test_the_stored_plan_reads_back_typed_and_an_older_one_with_its_defaults(store_location: str) -> None:
    """The plan as it ran comes back typed; a plan an older layerbench stored (no design keys,
    no run options) reads with the defaults that version behaved as; a key this version does
    not know is kept for the export, which adds none."""
    from layerbench import stats
    from layerbench.store import StoredPlan
    from layerbench.store.records import LEGACY_EQUIVALENCE

    store = Store(store_location)
    stored = {
        "stacks": {"a": [], "b": [{"kind": "bind"}]},
        "workloads": {"w": {"kind": "metadata", "files": 10}},
        "reps": 3,
        "order": "sequential",
        "equivalence": 0.2,
        "run_options": {"quick": True, "reps": 3, "budget": None},
        "a_key_of_a_newer_version": [1, 2],
    }
    new = new_experiment(store, plan=stored)
    old = new_experiment(store, plan={"stacks": {"a": []}, "workloads": {"w": {"kind": "extract"}}})
    plan, older = store.experiment(new).plan, store.experiment(old).plan
    store.close()
    assert (
        isinstance(plan, StoredPlan) and list(plan.stacks) == ["a", "b"] and plan.kind_of("w") == "metadata"
    )
    assert plan.run_options.quick and plan.run_options.reps == 3
    assert stats.Design.of_plan(plan) == stats.Design(equivalence=0.2, paired=False)
    assert plan.model_dump(exclude_unset=True) == stored
    assert older.run_options.quick is False and older.reps == 0
    # A results file that stores no margin was decided at the margin of its day, not today's.
    assert stats.Design.of_plan(older) == stats.Design(equivalence=LEGACY_EQUIVALENCE, paired=True)
    assert stats.Design.of_plan(None) == stats.Design(paired=True)
    assert older.model_dump(exclude_unset=True) == {
        "stacks": {"a": []},
        "workloads": {"w": {"kind": "extract"}},
    }


def test_a_stored_sample_has_exactly_the_samplers_fields() -> None:
    """The samples table, its read side and the sampler's Sample name the same counters."""
    written = [f.name for f in fields(SamplerSample)]
    assert list(SAMPLE_COLUMNS) == written == [f.name for f in fields(SampleRecord)]
