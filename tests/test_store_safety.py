"""A --db that is not what it should be is never written to: a database of another program is
refused by every command and left as it was (SQLite: its bytes and mtime; PostgreSQL: its
schemas, tables, columns and rows); commands that only read open the store read-only and
never migrate it; `layerbench migrate` upgrades an older store on purpose, after a backup."""

import glob
import os
import shutil
import sqlite3
from datetime import date
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic import command
from helpers import cli, new_experiment, one_line_error, run_row
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from layerbench.core import metrics
from layerbench.store import Store, migrate

LANDED = Path(__file__).parent / "fixtures" / "landed-main-2026-12-01.db"  # before migrations
PASSWORD = "s3cret"
PLAN = 'name = "t"\n[stacks.a]\nlayers = []\n[workloads.nap]\nkind = "command"\nrun = "true"\n'
EVERY_COMMAND = ["run", "report", "compare", "compare-fleet", "history", "migrate", "clean"]
READING_COMMANDS = ["report", "compare", "compare-fleet", "history"]


def _command(name: str, db: str, tmp_path: Path, scratch: Path) -> list[str]:
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    return {
        "run": ["run", str(plan), "--db", db, "--scratch", str(scratch), "--quiet"],
        "report": ["report", "--db", db],
        "compare": ["compare", "1", "1", "--db", db],
        "compare-fleet": ["compare", "--fleet", "f1", "--db", db],
        "history": ["history", "--db", db],
        "migrate": ["migrate", "--db", db],
        "clean": ["clean", "--db", db, "--scratch", str(scratch)],
    }[name]


# ---- SQLite ------------------------------------------------------------------------------


def _file_state(path: Path) -> tuple[bytes, int, list[str]]:
    """The file's bytes and mtime, and what lies beside it (no journal, no WAL, no copy)."""
    return path.read_bytes(), path.stat().st_mtime_ns, sorted(os.listdir(path.parent))


@pytest.fixture
def other_programs_file(tmp_path: Path) -> Path:
    path = tmp_path / "shop" / "other.db"
    path.parent.mkdir()
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    connection.execute("INSERT INTO customers (name) VALUES ('Ada Lovelace')")
    connection.commit()
    connection.close()
    return path


@pytest.mark.parametrize("name", EVERY_COMMAND)
def test_every_command_refuses_another_programs_sqlite_file_and_leaves_it_as_it_was(
    other_programs_file: Path, tmp_path: Path, scratch_root: Path, name: str
) -> None:
    before = _file_state(other_programs_file)
    done = cli(*_command(name, str(other_programs_file), tmp_path, scratch_root))
    line = one_line_error(done)
    assert str(other_programs_file) in line and "not a layerbench results file" in line, line
    assert "table customers" in line, line
    assert _file_state(other_programs_file) == before
    assert not scratch_root.exists()  # refused before run or clean touched the scratch root


@pytest.mark.parametrize("name", READING_COMMANDS)
def test_commands_that_read_leave_a_file_of_an_older_layerbench_as_it_was(
    tmp_path: Path, scratch_root: Path, name: str
) -> None:
    copy = tmp_path / "landed.db"
    shutil.copy2(LANDED, copy)
    before = copy.read_bytes(), copy.stat().st_mtime_ns
    line = one_line_error(cli(*_command(name, str(copy), tmp_path, scratch_root)))
    assert "from an older layerbench (pre-migration schema 1)" in line and "`layerbench migrate`" in line
    assert (copy.read_bytes(), copy.stat().st_mtime_ns) == before
    assert not glob.glob(f"{copy}.*.bak")


@pytest.mark.parametrize("name", [*READING_COMMANDS, "migrate"])
def test_a_missing_file_is_one_line_and_never_created(tmp_path: Path, scratch_root: Path, name: str) -> None:
    missing = tmp_path / "typo.db"
    line = one_line_error(cli(*_command(name, str(missing), tmp_path, scratch_root)))
    assert f"{missing}: no results database" in line
    assert sorted(os.listdir(tmp_path)) == ["plan.toml"]


def test_migrate_upgrades_a_file_of_an_older_layerbench_after_a_backup(tmp_path: Path) -> None:
    copy = tmp_path / "landed.db"
    shutil.copy2(LANDED, copy)
    as_it_was = list(sqlite3.connect(copy).iterdump())
    done = cli("migrate", "--db", str(copy), check=True)
    (backup,) = (Path(p) for p in glob.glob(f"{copy}.*.bak"))
    assert backup.name.startswith(f"landed.db.schema1-{date.today():%Y%m%d}-")
    assert done.stdout == (
        f"{copy}: upgraded from pre-migration schema 1 to revision {migrate.head()}; "
        f"the file as it was is kept in {backup}\n"
    )
    assert list(sqlite3.connect(backup).iterdump()) == as_it_was
    connection = sqlite3.connect(copy)
    assert connection.execute("SELECT version_num FROM alembic_version").fetchone()[0] == migrate.head()
    assert connection.execute("SELECT count(*) FROM runs").fetchone()[0] == 10
    connection.close()
    assert "landed-fixture" in cli("history", "--db", str(copy), "--format", "json", check=True).stdout
    again = cli("migrate", "--db", str(copy), check=True)
    assert "nothing to do" in again.stdout and len(glob.glob(f"{copy}.*.bak")) == 1


def test_a_read_only_store_cannot_write(store_location: str) -> None:
    writer = Store(store_location)
    ident = new_experiment(writer)
    writer.close()
    reader = Store(store_location, read_only=True)
    with pytest.raises(DBAPIError, match=r"read-?only"):
        new_experiment(reader)
    with pytest.raises(DBAPIError, match=r"read-?only"), reader.engine.begin() as connection:
        connection.execute(text("CREATE TABLE intruder (x INTEGER)"))
    assert [e.id for e in reader.history()] == [ident]
    with reader.engine.connect() as connection:
        assert "intruder" not in migrate.survey(connection).tables
    reader.close()


def test_a_counter_registered_since_the_store_was_written_reads_as_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "r.db"
    writer = Store(db)
    ident = new_experiment(writer)
    writer.add_run_row(ident, run_row(), {}, {})
    writer.close()
    counter = metrics.Metric("pressure_io_s", "time stalled on I/O", "s", better="lower")
    registry = (*metrics.METRICS, counter)
    monkeypatch.setattr(metrics, "METRICS", registry)
    monkeypatch.setattr(metrics, "BY_NAME", {m.name: m for m in registry})
    before = db.read_bytes()
    (stored,) = Store(db, read_only=True).runs(ident)
    assert stored.value("pressure_io_s") is None and stored.wall_s == 1
    assert db.read_bytes() == before


# ---- PostgreSQL --------------------------------------------------------------------------


def _database(cluster: Any, request: pytest.FixtureRequest, *statements: str) -> str:
    """A new database with these statements run in it; its URL, with a password the
    server (trust) ignores and no message may show."""
    name = "s" + format(abs(hash(request.node.nodeid)) % 10**12, "d")
    cluster.create_database(name)
    url = f"postgresql://postgres:{PASSWORD}@/{name}?host={cluster.socket}"
    _execute(url, *statements)
    return url


def _connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url.replace(f":{PASSWORD}", ""), autocommit=True)


def _execute(url: str, *statements: str) -> None:
    with _connect(url) as db:
        for statement in statements:
            db.execute(statement)


def _database_state(url: str) -> tuple[list[Any], ...]:
    """Every user schema, table and column, with the rows of every table."""
    user_schemas = "NOT IN ('pg_catalog', 'information_schema', 'pg_toast')"
    with _connect(url) as db:
        schemas = db.execute(
            f"SELECT schema_name FROM information_schema.schemata WHERE schema_name {user_schemas}"
        )
        tables = db.execute(
            f"SELECT table_schema, table_name, table_type FROM information_schema.tables "
            f"WHERE table_schema {user_schemas} ORDER BY 1, 2"
        ).fetchall()
        columns = db.execute(
            f"SELECT table_schema, table_name, column_name, data_type, is_nullable "
            f"FROM information_schema.columns WHERE table_schema {user_schemas} ORDER BY 1, 2, 3"
        ).fetchall()
        rows = [db.execute(f'SELECT * FROM "{s}"."{t}" ORDER BY 1').fetchall() for s, t, _ in tables]
        return sorted(schemas.fetchall()), tables, columns, rows


SHOP = (
    "CREATE TABLE customers (id serial PRIMARY KEY, name text NOT NULL)",
    "INSERT INTO customers (name) VALUES ('Ada Lovelace')",
)
# Another program's tables in a schema of their own: the default schema is empty.
ELSEWHERE = (
    "CREATE SCHEMA app",
    "CREATE TABLE app.orders (id serial PRIMARY KEY)",
    "INSERT INTO app.orders DEFAULT VALUES",
)


@pytest.mark.parametrize("name", EVERY_COMMAND)
@pytest.mark.parametrize("tables", [SHOP, ELSEWHERE], ids=["customers", "another-schema"])
def test_every_command_refuses_another_programs_postgresql_database_and_leaves_it_as_it_was(
    postgres_cluster: Any,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    scratch_root: Path,
    name: str,
    tables: tuple[str, ...],
) -> None:
    url = _database(postgres_cluster, request, *tables)
    before = _database_state(url)
    line = one_line_error(cli(*_command(name, url, tmp_path, scratch_root)))
    assert "not a layerbench results database" in line, line
    assert ("table customers" if tables is SHOP else "table app.orders") in line, line
    database = url.split("@")[1].split("?")[0]
    assert f"postgres:***@{database}?" in line and PASSWORD not in line, line
    assert _database_state(url) == before
    assert not scratch_root.exists()


@pytest.mark.parametrize("name", [*READING_COMMANDS, "migrate"])
def test_commands_that_read_and_migrate_leave_an_empty_postgresql_database_empty(
    postgres_cluster: Any, request: pytest.FixtureRequest, tmp_path: Path, scratch_root: Path, name: str
) -> None:
    url = _database(postgres_cluster, request)
    line = one_line_error(cli(*_command(name, url, tmp_path, scratch_root)))
    assert "holds no layerbench results" in line, line
    assert _database_state(url)[1] == []


def test_an_older_postgresql_store_is_read_by_no_command_until_migrate_upgrades_it_at_once(
    postgres_cluster: Any, request: pytest.FixtureRequest, tmp_path: Path, scratch_root: Path
) -> None:
    url = _database(postgres_cluster, request)
    store = Store(url)
    ident = new_experiment(store)
    with store.engine.begin() as connection:
        command.downgrade(migrate._config(connection), "0001")
    store.close()
    before = _database_state(url)
    for name in READING_COMMANDS:
        line = one_line_error(cli(*_command(name, url, tmp_path, scratch_root)))
        assert "results database is from an older layerbench (revision 0001)" in line, line
    assert _database_state(url) == before
    # 0002 cannot create its table: the upgrade fails as a whole, none of it stays.
    _execute(url, "CREATE TABLE fleets (id text)")
    blocked = _database_state(url)
    assert 'relation "fleets" already exists' in one_line_error(cli("migrate", "--db", url))
    assert _database_state(url) == blocked
    _execute(url, "DROP TABLE fleets")
    done = cli("migrate", "--db", url, check=True)
    assert done.stdout.endswith(
        f"upgraded from revision 0001 to revision {migrate.head()} in one transaction\n"
    )
    assert Store(url, read_only=True).experiment(ident).fleet is None
