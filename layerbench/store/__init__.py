"""The results store: an SQLite file (the embedded default) or a PostgreSQL database. Nothing
else in layerbench speaks SQL.

Each run is committed as soon as it finishes, so an interrupted experiment keeps every
finished run. On SQLite, WAL mode keeps the file consistent if the process is killed
mid-write and one writer at a time holds its lock; PostgreSQL takes many writers at once
(the hosts of a fleet). The schema is defined once (schema.py) and created or upgraded by
Alembic (migrate.py).

A store opens one of two ways. Read-only (report, compare, history): an SQLite file in SQLite's
read-only mode, PostgreSQL in read-only transactions; nothing is created, migrated or written,
and a store of an older layerbench is refused with the command that upgrades it. For writing
(run): the schema is created in an empty database and a store of an older layerbench is
upgraded, an SQLite file after a backup beside it. Either way a database of another program
(tables, no layerbench metadata) is refused before anything touches it.

A store that goes away once open (the server stopped, the connection cut, the disk full) is
StoreLost: one line, never a traceback. Every write is one transaction, so what went away
mid-write is absent, never half there.
"""

import contextlib
import json
import os
import shutil
import socket
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from sqlalchemy import Connection, Engine, Table, create_engine, event, func, inspect, select
from sqlalchemy.engine import URL, CursorResult, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError, SQLAlchemyError

from layerbench.core import metrics
from layerbench.core.errors import UserError
from layerbench.core.facts import Fact
from layerbench.core.facts import check as check_facts
from layerbench.core.runs import RunRecord
from layerbench.observe.sentinel import Sample
from layerbench.store import migrate, schema
from layerbench.store.records import (
    BisectRecord,
    BisectState,
    ExperimentRecord,
    ExperimentSummary,
    FleetMember,
    FleetRecord,
    HostRecord,
    SampleRecord,
    StackRecord,
    StoredPlan,
)
from layerbench.store.schema import SAMPLE_COLUMNS, SCHEMA_VERSION, run_columns, runs_with
from layerbench.store.schema import bisects as bisects_table
from layerbench.store.schema import experiment_facts as facts_table
from layerbench.store.schema import experiments as experiments_table
from layerbench.store.schema import fleets as fleets_table
from layerbench.store.schema import samples as samples_table
from layerbench.store.schema import sentinels as sentinels_table

if TYPE_CHECKING:
    from layerbench.store.records import TrialResult

__all__ = [
    "SAMPLE_COLUMNS",
    "SCHEMA_VERSION",
    "ExperimentRecord",
    "ExperimentSummary",
    "FleetRecord",
    "HostRecord",
    "Location",
    "NoResults",
    "SampleRecord",
    "Store",
    "StoreLost",
    "StoredPlan",
    "Upgrade",
    "locate",
    "now",
    "run_columns",
]

_SCHEMES = ("sqlite", "postgresql")

T = TypeVar("T")
# A row as the database driver gives it (its values typed only by the columns): made into a
# typed record (RunRecord, ExperimentRecord ...) before it leaves the store.
Row = dict[str, Any]


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def this_machine() -> str:
    return socket.gethostname()


def _inserted_key(result: CursorResult[Any]) -> int:
    """The primary key of the row an insert of one row made (SQLAlchemy types it optional:
    it is None only after an insert of many rows or a statement that is no insert)."""
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


@dataclass(frozen=True)
class Location:
    """Where a store is: an SQLite file (path) or a database URL."""

    url: URL
    path: Path | None = None  # the SQLite file

    def __str__(self) -> str:
        """Never with a password: this is printed."""
        if self.path is not None:
            return str(self.path)
        return self.url.render_as_string(hide_password=True)

    @property
    def is_sqlite(self) -> bool:
        return self.path is not None

    @property
    def noun(self) -> str:
        return "results file" if self.is_sqlite else "results database"

    def exists(self) -> bool:
        """A file must exist to be read; a database server is asked when opened."""
        return self.path is None or self.path.exists()


def locate(where: "str | Path | Location") -> Location:
    """--db's value: a path (SQLite) or a URL (sqlite:///..., postgresql://user@host/db)."""
    if isinstance(where, Location):
        return where
    text = str(where)
    if "://" not in text:
        path = Path(text)
        return Location(URL.create("sqlite", database=str(path)), path)
    try:
        url = make_url(text)
    except (ArgumentError, ValueError):
        shown = text.split("@")[-1]
        raise UserError(
            f"--db {shown!r}: not a database URL (give a path, or postgresql://USER@HOST/DB)"
        ) from None
    scheme = url.get_backend_name()
    if scheme not in _SCHEMES:
        raise UserError(
            f"--db {url.render_as_string(hide_password=True)}: a {scheme} database is not supported; "
            "give a path (SQLite) or postgresql://USER@HOST/DB"
        )
    if scheme == "sqlite":
        if not url.database:
            raise UserError("--db sqlite://: give a file, e.g. sqlite:///results.db")
        return Location(url, Path(url.database))
    if url.get_driver_name() != "psycopg":
        url = url.set(drivername="postgresql+psycopg")
    if not url.database:
        raise UserError(f"--db {url.render_as_string(hide_password=True)}: the URL names no database")
    return Location(url)


def _engine(location: Location, *, read_only: bool = False) -> Engine:
    if location.is_sqlite and read_only:
        # SQLite's own read-only mode (a URI filename): the file is never created or written,
        # whatever is executed through this engine.
        assert location.path is not None
        url = URL.create(
            "sqlite+pysqlite",
            database=f"file:{quote(str(location.path))}",
            query={"mode": "ro", "uri": "true"},
        )
        return create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
    if location.is_sqlite:
        # A fleet's head writes from a thread per host: SQLite's lock keeps one writer at a time.
        engine = create_engine(location.url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _pragmas(connection: Any, record: Any) -> None:
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    arguments: dict[str, object] = {"connect_timeout": 10}
    if read_only:
        # Set when the session starts (libpq's options), so no rollback or reset undoes it:
        # every transaction of the session is read-only.
        given = location.url.query.get("options", "")
        arguments["options"] = f"{given} -c default_transaction_read_only=on".strip()
    return create_engine(location.url, connect_args=arguments, pool_pre_ping=True)


def _backup(path: Path, found: migrate.Found) -> Path:
    """A copy of an SQLite store beside it, named with its revision and the date, taken through
    SQLite (the file's WAL may hold committed runs the file itself does not yet)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.{found.revision_label()}-{stamp}.bak")
    for attempt in range(2, 100):
        try:
            target.touch(exist_ok=False)  # never over an earlier backup
            break
        except FileExistsError:
            target = path.with_name(f"{path.name}.{found.revision_label()}-{stamp}-{attempt}.bak")
    shutil.copymode(path, target)  # results may be private: the copy is no less so
    source = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    copy = sqlite3.connect(target)
    with contextlib.closing(source), contextlib.closing(copy):
        source.backup(copy)
    return target


def _first_line(exc: BaseException) -> str:
    original = getattr(exc, "orig", None) or exc
    return (str(original).strip().splitlines() or [type(original).__name__])[0]


def _run_record(record: Row) -> RunRecord:
    """A row of the runs table as every reader reads it (a counter registered since the store
    was written reads None)."""
    record["devices"] = json.loads(record.pop("devices_json"))
    record["facts"] = json.loads(record.pop("facts_json"))
    return RunRecord.from_row(record)


def _sample_record(row: Mapping[str, Any]) -> SampleRecord:
    return SampleRecord(**{name: row[name] for name in SAMPLE_COLUMNS})


class NoResults(UserError):
    """Nothing to read: a missing SQLite file, or a database without a table."""


class StoreLost(UserError):
    """An open store can no longer be reached or written: the server stopped or the
    connection was cut (PostgreSQL), the disk is full or the file locked too long (SQLite).
    Not bad input, and not a bug: exit status 1 (2 is for bad input, 3 for a bug)."""

    exit_status = 1

    def __init__(self, location: Location, cause: str) -> None:
        super().__init__(f"{location.noun} {location}: went away ({cause})")
        self.location = location
        self.cause = cause


@dataclass(frozen=True)
class Upgrade:
    """An older store brought to this layerbench's schema when it opened for writing."""

    before: str  # e.g. "revision 0001"
    after: str
    backup: Path | None  # the SQLite file as it was


class Store:
    """A results store, opened read-only or for writing (see the module's docstring).

    read_only: never creates, migrates or writes; the store must be layerbench's and current.
    create: for writing, an empty database (or a missing SQLite file) gets the schema; without
    it, one is refused as holding no results.
    """

    def __init__(
        self, where: "str | Path | Location", *, read_only: bool = False, create: bool = True
    ) -> None:
        self.location = locate(where)
        self.path = self.location  # how messages name the store
        self.read_only = read_only
        self.upgraded: Upgrade | None = None
        # The metric columns a read-only store has: a counter registered since it was
        # written has none (its values read as None). Writing, every one is made.
        self._metric_columns: tuple[str, ...] | None = None
        reader = _engine(self.location, read_only=True)
        self.engine = reader
        try:
            found = self._survey(reader, may_be_missing=create and not read_only)
            if read_only:
                self._check_readable(found)
                with reader.connect() as connection:
                    present = {c["name"] for c in inspect(connection).get_columns("runs")}
                self._metric_columns = tuple(n for n in metrics.column_names() if n in present)
                return
            reader.dispose()
            if found.is_empty and not create:
                raise NoResults(f"{self.location}: holds no layerbench results")
            backup = None
            if self.location.is_sqlite and found.is_layerbench and not found.is_current:
                assert self.location.path is not None
                backup = _backup(self.location.path, found)
            self.engine = _engine(self.location)
            with self.engine.begin() as connection:
                migrate.upgrade(connection)
            if found.is_layerbench and not found.is_current:
                self.upgraded = Upgrade(found.describe_revision(), f"revision {migrate.head()}", backup)
        except migrate.NotLayerbench as exc:
            self.engine.dispose()
            raise UserError(
                f"{self.location}: not a layerbench {self.location.noun}: it holds {exc} and no "
                "layerbench metadata; left as it is (check --db)"
            ) from None
        except migrate.NewerSchema as exc:
            self.engine.dispose()
            raise UserError(
                f"{self.location.noun} {self.location}: written by a newer layerbench ({exc}); "
                "use that version, or another --db"
            ) from None
        except UserError:
            self.engine.dispose()
            raise
        except (SQLAlchemyError, DBAPIError, sqlite3.Error, OSError) as exc:
            self.engine.dispose()
            raise UserError(f"{self.location.noun} {self.location}: {_first_line(exc)}") from None

    def _survey(self, reader: Engine, *, may_be_missing: bool) -> migrate.Found:
        """What the database holds, refused if no layerbench may open it; read-only."""
        if self.location.is_sqlite and not self.location.exists():
            if may_be_missing:
                return migrate.EMPTY  # run makes it
            raise NoResults(f"{self.location}: no results database; run `layerbench run` first")
        with reader.connect() as connection:
            found = migrate.survey(connection)
        migrate.check(found)
        return found

    def _check_readable(self, found: migrate.Found) -> None:
        if found.is_empty:
            raise NoResults(f"{self.location}: holds no layerbench results; `layerbench run` stores some")
        if not found.is_current:
            raise UserError(
                f"{self.location}: this {self.location.noun} is from an older layerbench "
                f"({found.describe_revision()}); `layerbench migrate` with the same --db upgrades it"
            )

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def upgrade_line(self) -> str | None:
        """What opening an older store did to it, in one line; None if it was current."""
        upgrade = self.upgraded
        if upgrade is None:
            return None
        line = f"{self.location}: upgraded from {upgrade.before} to {upgrade.after}"
        if upgrade.backup is None:
            return line + " in one transaction"
        return line + f"; the file as it was is kept in {upgrade.backup}"

    @contextmanager
    def _connection(self, *, transaction: bool) -> Iterator[Connection]:
        """A connection of the open store (in one transaction, committed at the end of the
        block, if asked); a store gone away is StoreLost."""
        try:
            with self.engine.begin() if transaction else self.engine.connect() as connection:
                yield connection
        except DBAPIError as exc:
            # OperationalError: the database's own word for "not reachable or not writable
            # now" (connection refused or cut, disk full, locked). Any other error whose
            # connection died with it is the same thing seen mid-statement.
            # A write through a store opened read-only is refused by the database itself
            # (SQLite says so with an OperationalError): that is the refusal, not a loss.
            gone = isinstance(exc, OperationalError) and not self.read_only
            if gone or exc.connection_invalidated:
                raise StoreLost(self.location, _first_line(exc)) from None
            raise

    def _write(self) -> "contextlib.AbstractContextManager[Connection]":
        """One transaction, committed at the end of the block."""
        return self._connection(transaction=True)

    def _runs(self) -> Table:
        """The runs table: a column per metric registered now, or those a read-only store has."""
        if self._metric_columns is None:
            return schema.runs()
        return runs_with(self._metric_columns)

    def _read(self, statement: Any) -> list[Row]:
        with self._connection(transaction=False) as connection:
            return [dict(row._mapping) for row in connection.execute(statement)]

    # -- writing
    def create_experiment(
        self,
        *,
        name: str,
        plan_source: str,
        plan_text: str,
        plan: Mapping[str, object],
        seed: int,
        baseline: str,
        host: Mapping[str, object],
        version: str,
        warnings: list[str],
        fleet: str | None = None,
        host_name: str | None = None,
    ) -> int:
        values = {
            "name": name,
            "status": "running",
            "plan_source": plan_source,
            "plan_text": plan_text,
            "plan_json": json.dumps(plan),
            "seed": seed,
            "baseline": baseline,
            "started": now(),
            "host_json": json.dumps(host),
            "warnings_json": json.dumps(warnings),
            "version": version,
            "pid": os.getpid(),
            "owner": this_machine(),
            "fleet": fleet,
            "host_name": host_name,
        }
        with self._write() as connection:
            result = connection.execute(experiments_table.insert().values(values))
            return _inserted_key(result)

    def _update(self, experiment_id: int, **values: Any) -> None:
        with self._write() as connection:
            connection.execute(
                experiments_table.update().where(experiments_table.c.id == experiment_id).values(values)
            )

    def _json_field(self, connection: Connection, experiment_id: int, column: str) -> Any:
        statement = select(experiments_table.c[column]).where(experiments_table.c.id == experiment_id)
        return json.loads(connection.execute(statement).scalar_one())

    def set_stack_info(self, experiment_id: int, stack: str, info: Mapping[str, object]) -> None:
        with self._write() as connection:
            stacks = self._json_field(connection, experiment_id, "stacks_json")
            stacks[stack] = info
            connection.execute(
                experiments_table.update()
                .where(experiments_table.c.id == experiment_id)
                .values(stacks_json=json.dumps(stacks))
            )

    def add_warning(self, experiment_id: int, warning: str) -> None:
        with self._write() as connection:
            warnings = self._json_field(connection, experiment_id, "warnings_json")
            if warning in warnings:
                return
            warnings.append(warning)
            connection.execute(
                experiments_table.update()
                .where(experiments_table.c.id == experiment_id)
                .values(warnings_json=json.dumps(warnings))
            )

    def add_run(self, experiment_id: int, result: "TrialResult") -> None:
        """One trial's run with its devices, facts and samples, committed at once."""
        stored_facts = result.all_facts()
        check_facts(stored_facts)
        self.add_run_row(
            experiment_id, result.row(), result.counters.devices, stored_facts, result.counters.samples
        )

    def add_run_row(
        self,
        experiment_id: int,
        run: Mapping[str, Any],
        devices: Mapping[str, Mapping[str, int]],
        facts: Mapping[str, object],
        samples: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """A run given as a row of the runs table (columns as in run_columns())."""
        values = {c: run.get(c) for c in run_columns()} | {
            "experiment_id": experiment_id,
            "devices_json": json.dumps(devices),
            "facts_json": json.dumps(facts),
        }
        with self._write() as connection:  # the run and its samples land together
            run_id = _inserted_key(connection.execute(self._runs().insert().values(values)))
            if samples:
                connection.execute(
                    samples_table.insert(),
                    [{"run_id": run_id} | {c: s.get(c) for c in SAMPLE_COLUMNS} for s in samples],
                )

    def add_sentinel(self, experiment_id: int, sample: Sample) -> None:
        with self._write() as connection:
            key = (sentinels_table.c.experiment_id == experiment_id) & (sentinels_table.c.seq == sample.seq)
            connection.execute(sentinels_table.delete().where(key))
            connection.execute(
                sentinels_table.insert().values(
                    experiment_id=experiment_id,
                    seq=sample.seq,
                    taken=sample.taken,
                    after_trial=sample.after_trial,
                    cost_s=sample.cost_s,
                    parts_json=json.dumps(sample.parts),
                )
            )

    def set_experiment_fact(self, experiment_id: int, key: str, value: Any) -> None:
        """What an experiment learned about itself as it ran (e.g. the repetitions it needed)."""
        with self._write() as connection:
            match = (facts_table.c.experiment_id == experiment_id) & (facts_table.c.key == key)
            connection.execute(facts_table.delete().where(match))
            connection.execute(
                facts_table.insert().values(
                    experiment_id=experiment_id, key=key, value_json=json.dumps(value)
                )
            )

    def finish_experiment(self, experiment_id: int, status: str, reason: str | None = None) -> None:
        """Its end; a reason (host lost) given once stays with an interrupted experiment."""
        values: dict[str, object] = {"status": status, "finished": now()}
        if reason is not None:
            values["status_reason"] = reason
        self._update(experiment_id, **values)

    def reopen_experiment(self, experiment_id: int) -> None:
        """An interrupted experiment runs again (for --resume), under this process."""
        self._update(
            experiment_id,
            status="running",
            finished=None,
            status_reason=None,
            pid=os.getpid(),
            owner=this_machine(),
        )

    def mark_running_interrupted(self) -> list[int]:
        """Experiments whose process on this machine is gone (killed, or it lost the store
        and could not say so) become 'interrupted', with that as the reason. A shared database
        holds other machines' running experiments: those are left alone."""
        table = experiments_table
        rows = self._read(select(table.c.id, table.c.pid, table.c.owner).where(table.c.status == "running"))
        mine = [r for r in rows if r["owner"] in (None, this_machine())]
        gone = [r for r in mine if r["pid"] is None or not Path(f"/proc/{r['pid']}").exists()]
        for row in gone:
            process = "its process" if row["pid"] is None else f"its process (pid {row['pid']})"
            self.finish_experiment(row["id"], "interrupted", f"{process} ended while it ran")
        self._mark_dead_bisects_interrupted()
        return [row["id"] for row in gone]

    def _mark_dead_bisects_interrupted(self) -> None:
        """A bisect whose process on this machine is gone is interrupted, as its experiment is."""
        table = bisects_table
        rows = self._read(select(table.c.id, table.c.pid, table.c.owner).where(table.c.status == "running"))
        for row in rows:
            if row["owner"] in (None, this_machine()) and not Path(f"/proc/{row['pid']}").exists():
                with self._write() as connection:
                    update = table.update().where(table.c.id == row["id"])
                    connection.execute(update.values(status="interrupted", finished=now()))

    def interrupt_mine(self) -> list[int]:
        """This process's running experiments (a fleet's, when its head is stopped) end interrupted."""
        table = experiments_table
        rows = self._read(
            select(table.c.id).where(
                (table.c.status == "running")
                & (table.c.pid == os.getpid())
                & (table.c.owner == this_machine())
            )
        )
        for row in rows:
            self.finish_experiment(row["id"], "interrupted")
        return [row["id"] for row in rows]

    def create_fleet(
        self, ident: str, *, name: str, plan_source: str, reference: str, hosts: list[str]
    ) -> None:
        with self._write() as connection:
            connection.execute(
                fleets_table.insert().values(
                    id=ident,
                    name=name,
                    plan_source=plan_source,
                    started=now(),
                    reference=reference,
                    hosts_json=json.dumps(hosts),
                )
            )

    # -- reading
    def state(self) -> tuple[Any, ...]:
        """What changes whenever the history would read differently: an experiment added or
        ended or its status changed, a run stored. Two cheap aggregate queries (the runs' by
        their key), for a reader that keeps what it computed until the store moves on."""
        e = experiments_table
        with self._connection(transaction=False) as connection:
            last_run = connection.execute(select(func.max(self._runs().c.id))).scalar()
            each = select(e.c.status, func.count(), func.max(e.c.id), func.max(e.c.finished))
            statuses = connection.execute(each.group_by(e.c.status)).all()
        return (last_run, tuple(sorted(tuple(row) for row in statuses)))

    def latest_experiment_id(self) -> int | None:
        with self._connection(transaction=False) as connection:
            return connection.execute(select(func.max(experiments_table.c.id))).scalar()

    def experiment(self, experiment_id: int) -> ExperimentRecord:
        rows = self._read(select(experiments_table).where(experiments_table.c.id == experiment_id))
        if not rows:
            raise UserError(f"{self.location}: no experiment {experiment_id}")
        record = rows[0]
        for key in ("plan_json", "host_json", "stacks_json", "warnings_json"):
            record[key.removesuffix("_json")] = json.loads(record.pop(key))
        facts = self._read(
            select(facts_table.c.key, facts_table.c.value_json).where(
                facts_table.c.experiment_id == experiment_id
            )
        )
        record["facts"] = {row["key"]: json.loads(row["value_json"]) for row in facts}
        record["stacks"] = {name: StackRecord.stored(info) for name, info in record["stacks"].items()}
        record["plan"] = StoredPlan.model_validate(record["plan"])
        record["host"] = HostRecord.model_validate(record["host"])
        return ExperimentRecord(**record)

    def runs(self, experiment_id: int) -> list[RunRecord]:
        rows = self._read(
            select(table := self._runs())
            .where(table.c.experiment_id == experiment_id)
            .order_by(table.c.trial)
        )
        return [_run_record(record) for record in rows]

    def run(self, run_id: int) -> RunRecord | None:
        """One run by its id, as runs() gives it (with its experiment's id), or None."""
        rows = self._read(select(table := self._runs()).where(table.c.id == run_id))
        return _run_record(rows[0]) if rows else None

    def run_samples(self, run_id: int) -> list[SampleRecord]:
        """One run's time series, in time order."""
        statement = (
            select(samples_table).where(samples_table.c.run_id == run_id).order_by(samples_table.c.t_s)
        )
        return [_sample_record(r) for r in self._read(statement)]

    def run_count(self, experiment_id: int) -> int:
        with self._connection(transaction=False) as connection:
            statement = select(func.count()).where(self._runs().c.experiment_id == experiment_id)
            return int(connection.execute(statement).scalar_one())

    def sentinels(self, experiment_id: int) -> list[Sample]:
        """The experiment's drift probes, in the order they ran."""
        rows = self._read(
            select(sentinels_table)
            .where(sentinels_table.c.experiment_id == experiment_id)
            .order_by(sentinels_table.c.seq)
        )
        return [
            Sample(r["seq"], r["taken"], r["after_trial"], json.loads(r["parts_json"]), r["cost_s"])
            for r in rows
        ]

    def samples(self, experiment_id: int) -> dict[int, list[SampleRecord]]:
        """run id -> its time series, in time order."""
        series: dict[int, list[SampleRecord]] = {}
        statement = (
            select(samples_table)
            .join(runs := self._runs(), runs.c.id == samples_table.c.run_id)
            .where(runs.c.experiment_id == experiment_id)
            .order_by(samples_table.c.run_id, samples_table.c.t_s)
        )
        for record in self._read(statement):
            series.setdefault(record["run_id"], []).append(_sample_record(record))
        return series

    def fact_of_each(self, fact: Fact[T], experiment_ids: list[int]) -> dict[int, T]:
        """One fact of many experiments at once: experiment id -> its value, for those that
        have it."""
        found: dict[int, T] = {}
        for start in range(0, len(experiment_ids), 500):  # a bounded IN list for either back end
            chunk = experiment_ids[start : start + 500]
            statement = select(facts_table.c.experiment_id, facts_table.c.value_json).where(
                (facts_table.c.key == fact.key) & facts_table.c.experiment_id.in_(chunk)
            )
            for row in self._read(statement):
                if (value := fact.read({fact.key: json.loads(row["value_json"])})) is not None:
                    found[int(row["experiment_id"])] = value
        return found

    def history(
        self, *, name: str | None = None, experiment_id: int | None = None
    ) -> list[ExperimentSummary]:
        """Every experiment with its host and what it ran, oldest first; only a plan's (by its
        name) or only one, when asked."""
        e = experiments_table
        count = (
            select(func.count()).where(self._runs().c.experiment_id == e.c.id).scalar_subquery().label("runs")
        )
        statement = select(
            e.c.id,
            e.c.name,
            e.c.status,
            e.c.status_reason,
            e.c.started,
            e.c.finished,
            e.c.baseline,
            e.c.host_json,
            e.c.plan_json,
            e.c.fleet,
            e.c.host_name,
            count,
        ).order_by(e.c.id)
        if name is not None:
            statement = statement.where(e.c.name == name)
        if experiment_id is not None:
            statement = statement.where(e.c.id == experiment_id)
        result = []
        for record in self._read(statement):
            host = json.loads(record.pop("host_json"))
            plan = StoredPlan.model_validate_json(record.pop("plan_json"))
            record["host"] = record["host_name"] or host.get("hostname")
            record["kernel"] = host.get("kernel")
            record["stacks"] = list(plan.stacks)
            record["workloads"] = list(plan.workloads)
            result.append(ExperimentSummary(**record))
        return result

    def plan_names(self, status: str) -> list[str]:
        """The names of the plans with an experiment of this status, in the order they first
        ran."""
        e = experiments_table
        first = func.min(e.c.id)
        statement = select(e.c.name, first).where(e.c.status == status).group_by(e.c.name).order_by(first)
        return [str(row["name"]) for row in self._read(statement)]

    def fleet(self, ident: str) -> FleetRecord:
        """A fleet with its experiments (one per host), in the order of its hosts."""
        rows = self._read(select(fleets_table).where(fleets_table.c.id == ident))
        if not rows:
            raise UserError(f"{self.location}: no fleet {ident!r}")
        record = rows[0]
        record["hosts"] = json.loads(record.pop("hosts_json"))
        e = experiments_table
        members = self._read(
            select(e.c.id, e.c.host_name, e.c.status, e.c.status_reason)
            .where(e.c.fleet == ident)
            .order_by(e.c.id)
        )
        record["experiments"] = {m["host_name"]: FleetMember(**m) for m in members}
        return FleetRecord(**record)

    def fleet_of(self, experiment_id: int) -> str | None:
        with self._connection(transaction=False) as connection:
            statement = select(experiments_table.c.fleet).where(experiments_table.c.id == experiment_id)
            return connection.execute(statement).scalar()

    # -- a bisect (its comparisons are experiments)
    def create_bisect(
        self, *, name: str, plan_source: str, plan_text: str, good: str, bad: str, state: BisectState
    ) -> int:
        values = {
            "name": name,
            "plan_source": plan_source,
            "plan_text": plan_text,
            "good": good,
            "bad": bad,
            "status": "running",
            "started": now(),
            "pid": os.getpid(),
            "owner": this_machine(),
            "state_json": state.model_dump_json(),
        }
        with self._write() as connection:
            return _inserted_key(connection.execute(bisects_table.insert().values(values)))

    def save_bisect(self, ident: int, state: BisectState, status: str | None = None) -> None:
        """What the bisect knows now; with a status other than running, its end."""
        values: dict[str, object] = {"state_json": state.model_dump_json()}
        if status is not None:
            values |= {"status": status, "finished": None if status == "running" else now()}
            if status == "running":
                values |= {"pid": os.getpid(), "owner": this_machine()}
        with self._write() as connection:
            connection.execute(bisects_table.update().where(bisects_table.c.id == ident).values(values))

    def bisect(self, ident: int) -> BisectRecord:
        rows = self._read(select(bisects_table).where(bisects_table.c.id == ident))
        if not rows:
            raise UserError(f"{self.location}: no bisect {ident}")
        record = rows[0]
        record["state"] = BisectState.model_validate_json(record.pop("state_json"))
        return BisectRecord(**record)
