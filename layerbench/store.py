"""The results store: one SQLite file. Nothing else in layerbench speaks SQL.

Each run is committed as soon as it finishes, so an interrupted experiment keeps every
finished run. WAL mode keeps the file consistent if the process is killed mid-write.
"""

import json
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerbench import metrics
from layerbench.errors import UserError
from layerbench.sentinel import Sample

if TYPE_CHECKING:
    from layerbench.executors.base import TrialResult

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS experiments (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'done', 'interrupted', 'failed')),
    plan_source TEXT NOT NULL,
    plan_text TEXT NOT NULL,
    plan_json TEXT NOT NULL,
    seed INTEGER NOT NULL,
    baseline TEXT NOT NULL,
    started TEXT NOT NULL,
    finished TEXT,
    host_json TEXT NOT NULL,
    stacks_json TEXT NOT NULL DEFAULT '{}',
    warnings_json TEXT NOT NULL DEFAULT '[]',
    version TEXT NOT NULL,
    pid INTEGER
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    trial INTEGER NOT NULL,
    stack TEXT NOT NULL,
    workload TEXT NOT NULL,
    rep INTEGER NOT NULL,
    warmup INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
    error TEXT,
    exit_code INTEGER,
    started TEXT NOT NULL,
    @METRIC_COLUMNS@,
    units REAL, unit TEXT, throughput REAL,
    devices_json TEXT NOT NULL DEFAULT '{}',
    facts_json TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS experiment_facts (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    key TEXT NOT NULL,
    value_json TEXT NOT NULL,
    PRIMARY KEY (experiment_id, key)
);
CREATE INDEX IF NOT EXISTS runs_by_experiment ON runs (experiment_id, stack, workload);
CREATE TABLE IF NOT EXISTS samples (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    t_s REAL NOT NULL, dt_s REAL NOT NULL,
    read_bytes INTEGER, write_bytes INTEGER, disk_read_bytes INTEGER, disk_write_bytes INTEGER,
    cpu_busy_pct REAL, cpu_iowait_pct REAL, dirty_bytes INTEGER, disk_in_flight INTEGER
);
CREATE INDEX IF NOT EXISTS samples_by_run ON samples (run_id);
CREATE TABLE IF NOT EXISTS sentinels (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    seq INTEGER NOT NULL,
    taken TEXT NOT NULL,
    after_trial INTEGER,
    cost_s REAL NOT NULL,
    parts_json TEXT NOT NULL,
    PRIMARY KEY (experiment_id, seq)
);
"""

_RUN_FIELDS = ("trial", "stack", "workload", "rep", "warmup", "status", "error", "exit_code", "started")


def run_columns() -> tuple[str, ...]:
    """The runs table's columns a run row carries, the metrics' from the registry."""
    return (*_RUN_FIELDS, *metrics.column_names(), "units", "unit", "throughput")


SAMPLE_COLUMNS = (
    "t_s",
    "dt_s",
    "read_bytes",
    "write_bytes",
    "disk_read_bytes",
    "disk_write_bytes",
    "cpu_busy_pct",
    "cpu_iowait_pct",
    "dirty_bytes",
    "disk_in_flight",
)
_LATER_SAMPLE_COLUMNS = {"dirty_bytes": "INTEGER", "disk_in_flight": "INTEGER"}


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Store:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.db = sqlite3.connect(path, isolation_level=None, timeout=30)
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(_SCHEMA.replace("@METRIC_COLUMNS@", metrics.column_definitions()))
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            self._check_version()
            self._add_missing_metric_columns()
        except sqlite3.DatabaseError as exc:
            raise UserError(f"results database {path}: {exc}") from None

    def _check_version(self) -> None:
        row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        found = int(row[0]) if row else SCHEMA_VERSION
        if found > SCHEMA_VERSION:
            raise UserError(
                f"results database {self.path}: written by a newer layerbench (schema {found}, this one "
                f"reads up to {SCHEMA_VERSION}); use that version, or another --db"
            )

    def _add_missing_metric_columns(self) -> None:
        """A file written before a metric (or a sample column) was registered gets its column
        (empty for old runs)."""
        present = {row[1] for row in self.db.execute("PRAGMA table_info(runs)")}
        for name in metrics.column_names():
            if name not in present:
                kind = "INTEGER" if metrics.BY_NAME[name].integer else "REAL"
                self.db.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
        present = {row[1] for row in self.db.execute("PRAGMA table_info(samples)")}
        for name, kind in _LATER_SAMPLE_COLUMNS.items():
            if name not in present:
                self.db.execute(f"ALTER TABLE samples ADD COLUMN {name} {kind}")

    def close(self) -> None:
        self.db.close()

    # -- writing
    def create_experiment(
        self,
        *,
        name: str,
        plan_source: str,
        plan_text: str,
        plan: dict[str, Any],
        seed: int,
        baseline: str,
        host: dict[str, Any],
        version: str,
        warnings: list[str],
    ) -> int:
        cursor = self.db.execute(
            "INSERT INTO experiments (name, status, plan_source, plan_text, plan_json, seed,"
            " baseline, started, host_json, warnings_json, version, pid)"
            " VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                name,
                plan_source,
                plan_text,
                json.dumps(plan),
                seed,
                baseline,
                now(),
                json.dumps(host),
                json.dumps(warnings),
                version,
                os.getpid(),
            ),
        )
        return int(cursor.lastrowid)  # type: ignore[arg-type]

    def set_stack_info(self, experiment_id: int, stack: str, info: dict[str, Any]) -> None:
        with self.db:
            row = self.db.execute(
                "SELECT stacks_json FROM experiments WHERE id = ?", (experiment_id,)
            ).fetchone()
            stacks = json.loads(row["stacks_json"])
            stacks[stack] = info
            self.db.execute(
                "UPDATE experiments SET stacks_json = ? WHERE id = ?",
                (json.dumps(stacks), experiment_id),
            )

    def add_warning(self, experiment_id: int, warning: str) -> None:
        row = self.db.execute(
            "SELECT warnings_json FROM experiments WHERE id = ?", (experiment_id,)
        ).fetchone()
        warnings = json.loads(row["warnings_json"])
        if warning not in warnings:
            warnings.append(warning)
            self.db.execute(
                "UPDATE experiments SET warnings_json = ? WHERE id = ?",
                (json.dumps(warnings), experiment_id),
            )

    def add_run(self, experiment_id: int, result: "TrialResult") -> None:
        """One trial's run with its devices, facts and samples, committed at once."""
        self.add_run_row(
            experiment_id,
            result.row(),
            result.counters.devices,
            result.all_facts(),
            result.counters.samples,
        )

    def add_run_row(
        self,
        experiment_id: int,
        run: dict[str, Any],
        devices: dict[str, Any],
        facts: dict[str, Any],
        samples: list[dict[str, Any]] = (),  # type: ignore[assignment]
    ) -> None:
        """A run given as a row of the runs table (columns as in run_columns())."""
        columns = ["experiment_id", *run_columns(), "devices_json", "facts_json"]
        values = [experiment_id, *(run.get(c) for c in run_columns()), json.dumps(devices), json.dumps(facts)]
        marks = ", ".join("?" for _ in columns)
        self.db.execute("BEGIN")  # the run and its samples land together
        try:
            run_id = self.db.execute(
                f"INSERT INTO runs ({', '.join(columns)}) VALUES ({marks})", values
            ).lastrowid
            self.db.executemany(
                f"INSERT INTO samples (run_id, {', '.join(SAMPLE_COLUMNS)})"
                f" VALUES (?, {', '.join('?' for _ in SAMPLE_COLUMNS)})",
                [(run_id, *(sample.get(c) for c in SAMPLE_COLUMNS)) for sample in samples],
            )
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def add_sentinel(self, experiment_id: int, sample: Sample) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO sentinels VALUES (?, ?, ?, ?, ?, ?)",
            (
                experiment_id,
                sample.seq,
                sample.taken,
                sample.after_trial,
                sample.cost_s,
                json.dumps(sample.parts),
            ),
        )

    def set_experiment_fact(self, experiment_id: int, key: str, value: Any) -> None:
        """What an experiment learned about itself as it ran (e.g. the repetitions it needed)."""
        self.db.execute(
            "INSERT OR REPLACE INTO experiment_facts VALUES (?, ?, ?)",
            (experiment_id, key, json.dumps(value)),
        )

    def finish_experiment(self, experiment_id: int, status: str) -> None:
        self.db.execute(
            "UPDATE experiments SET status = ?, finished = ? WHERE id = ?",
            (status, now(), experiment_id),
        )

    def reopen_experiment(self, experiment_id: int) -> None:
        """An interrupted experiment runs again (for --resume), under this process."""
        self.db.execute(
            "UPDATE experiments SET status = 'running', finished = NULL, pid = ? WHERE id = ?",
            (os.getpid(), experiment_id),
        )

    def mark_running_interrupted(self) -> list[int]:
        """Experiments whose process is gone (killed) become 'interrupted'."""
        ids = [
            r["id"]
            for r in self.db.execute("SELECT id, pid FROM experiments WHERE status = 'running'")
            if r["pid"] is None or not Path(f"/proc/{r['pid']}").exists()
        ]
        for ident in ids:
            self.finish_experiment(ident, "interrupted")
        return ids

    # -- reading
    def latest_experiment_id(self) -> int | None:
        row = self.db.execute("SELECT max(id) AS id FROM experiments").fetchone()
        return row["id"]

    def experiment(self, experiment_id: int) -> dict[str, Any]:
        row = self.db.execute("SELECT * FROM experiments WHERE id = ?", (experiment_id,)).fetchone()
        if row is None:
            raise UserError(f"{self.path}: no experiment {experiment_id}")
        record = dict(row)
        for key in ("plan_json", "host_json", "stacks_json", "warnings_json"):
            record[key.removesuffix("_json")] = json.loads(record.pop(key))
        facts = self.db.execute(
            "SELECT key, value_json FROM experiment_facts WHERE experiment_id = ?", (experiment_id,)
        )
        record["facts"] = {row["key"]: json.loads(row["value_json"]) for row in facts}
        return record

    def runs(self, experiment_id: int) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM runs WHERE experiment_id = ? ORDER BY trial", (experiment_id,))
        result = []
        for row in rows:
            record = dict(row)
            record["devices"] = json.loads(record.pop("devices_json"))
            record["facts"] = json.loads(record.pop("facts_json"))
            record["warmup"] = bool(record["warmup"])
            result.append(record)
        return result

    def sentinels(self, experiment_id: int) -> list[Sample]:
        """The experiment's drift probes, in the order they ran."""
        return [
            Sample(r["seq"], r["taken"], r["after_trial"], json.loads(r["parts_json"]), r["cost_s"])
            for r in self.db.execute(
                "SELECT * FROM sentinels WHERE experiment_id = ? ORDER BY seq", (experiment_id,)
            )
        ]

    def samples(self, experiment_id: int) -> dict[int, list[dict[str, Any]]]:
        """run id -> its time series, in time order."""
        series: dict[int, list[dict[str, Any]]] = {}
        for row in self.db.execute(
            "SELECT s.* FROM samples s JOIN runs r ON r.id = s.run_id"
            " WHERE r.experiment_id = ? ORDER BY s.run_id, s.t_s",
            (experiment_id,),
        ):
            record = dict(row)
            series.setdefault(record.pop("run_id"), []).append(record)
        return series

    def history(self) -> list[dict[str, Any]]:
        """Every experiment with its host and what it ran, oldest first."""
        result = []
        for row in self.db.execute(
            "SELECT e.id, e.name, e.status, e.started, e.finished, e.baseline, e.host_json,"
            " e.plan_json, (SELECT count(*) FROM runs r WHERE r.experiment_id = e.id) AS runs"
            " FROM experiments e ORDER BY e.id"
        ):
            record = dict(row)
            host, plan = json.loads(record.pop("host_json")), json.loads(record.pop("plan_json"))
            record["host"] = host.get("hostname")
            record["kernel"] = host.get("kernel")
            record["stacks"] = list(plan.get("stacks", {}))
            record["workloads"] = list(plan.get("workloads", {}))
            result.append(record)
        return result

    def experiments(self) -> list[dict[str, Any]]:
        return [
            dict(r)
            for r in self.db.execute(
                "SELECT id, name, status, started, finished, baseline FROM experiments ORDER BY id"
            )
        ]
