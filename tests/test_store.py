import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from layerbench.errors import UserError
from layerbench.store import Store, run_columns


def _experiment(store: Store) -> int:
    return store.create_experiment(
        name="t",
        plan_source="p.toml",
        plan_text="name='t'",
        plan={"stacks": {}},
        seed=1,
        baseline="a",
        host={"cpus": 2},
        version="0",
        warnings=[],
    )


def test_runs_round_trip(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    ident = _experiment(store)
    run = dict.fromkeys(run_columns(), 1) | {
        "stack": "a",
        "workload": "w",
        "status": "ok",
        "error": None,
        "unit": "bytes",
        "started": "now",
        "warmup": 0,
    }
    store.add_run_row(ident, run, {"vda": {"write_bytes": 5}}, {"fill_bytes": 7})
    (stored,) = store.runs(ident)
    assert stored["devices"] == {"vda": {"write_bytes": 5}} and stored["facts"] == {"fill_bytes": 7}
    assert stored["warmup"] is False and stored["wall_s"] == 1
    store.set_stack_info(ident, "a", {"layers": ["bind"]})
    store.add_warning(ident, "noisy")
    store.add_warning(ident, "noisy")
    record = store.experiment(ident)
    assert record["stacks"] == {"a": {"layers": ["bind"]}} and record["warnings"] == ["noisy"]
    assert store.latest_experiment_id() == ident


def test_killed_experiments_are_marked_interrupted(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    ident = _experiment(store)
    assert store.mark_running_interrupted() == []  # our own pid is alive
    store.db.execute("UPDATE experiments SET pid = 2147483647")  # no such process
    assert store.mark_running_interrupted() == [ident]
    assert store.experiment(ident)["status"] == "interrupted"


def test_missing_experiment_and_corrupt_file(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
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
