"""What a database holds, and creating or upgrading a store's schema there with Alembic.

Before anything is written, `survey` looks (through a read-only connection) at what the
database holds and `check` refuses what no layerbench may open: a database of another program
(tables, none of them layerbench's metadata) and a store of a newer layerbench. Every store
layerbench ever made has a `meta` table with a `schema_version` row: that is its mark.

A file from before the migrations (meta schema_version 1, no alembic_version) is stamped
with the first revision, then upgraded in place like any other."""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Column, Connection, inspect, text

from layerbench.core import metrics
from layerbench.store import schema

if TYPE_CHECKING:
    from alembic.config import Config

_SCRIPTS = Path(__file__).parent / "migrations"
# An empty SQLite file at the head revision, as its schema and rows (head_sqlite_text()).
_HEAD_SQLITE = _SCRIPTS / "head-sqlite.sql"
# The migrations' revisions, oldest first (tests/test_migrate.py checks them against the
# scripts): a store at the last one needs no Alembic, whose import (0.3 s) every command
# that opens a current store is spared.
REVISIONS = ("0001", "0002", "0003")
# PostgreSQL's own schemas: a database whose tables are all in these is empty to us.
_SYSTEM_SCHEMAS = ("information_schema", "pg_catalog", "pg_toast")


class Refused(Exception):
    """No layerbench may open this database; the text says what was found."""


class NotLayerbench(Refused):
    """The database holds tables of another program and none of layerbench's metadata."""


class NewerSchema(Refused):
    """The store was written by a newer layerbench."""


@dataclass(frozen=True)
class Found:
    """What a database holds, seen before anything is written to it."""

    # Tables and views of every user schema; on PostgreSQL those beyond the default one qualified.
    tables: tuple[str, ...]
    schema_version: int | None = None  # meta's: present on every store layerbench made
    revision: str | None = None  # Alembic's; None on a file from before the migrations

    @property
    def is_empty(self) -> bool:
        return not self.tables

    @property
    def is_layerbench(self) -> bool:
        return self.schema_version is not None

    @property
    def is_current(self) -> bool:
        return self.revision == head()

    def describe_revision(self) -> str:
        if self.revision is None:
            return f"pre-migration schema {self.schema_version}"
        return f"revision {self.revision}"

    def revision_label(self) -> str:
        """The revision, short enough for a file name."""
        return self.revision or f"schema{self.schema_version}"


EMPTY = Found(tables=())


def _config(connection: Connection) -> "Config":
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    config.attributes["connection"] = connection
    return config


def head() -> str:
    return REVISIONS[-1]


def survey(connection: Connection) -> Found:
    """What the database holds; reads only."""
    inspector = inspect(connection)
    if connection.dialect.name == "postgresql":
        # Every schema, not only the default: a database of another program may keep its
        # tables elsewhere, and is not ours to add tables to either way.
        default = inspector.default_schema_name
        tables = [
            name if owner == default else f"{owner}.{name}"
            for owner in inspector.get_schema_names()
            if owner not in _SYSTEM_SCHEMAS and not owner.startswith("pg_")
            for name in (*inspector.get_table_names(owner), *inspector.get_view_names(owner))
        ]
    else:
        tables = [*inspector.get_table_names(), *inspector.get_view_names()]
    found = Found(tables=tuple(sorted(tables)))
    if "meta" in tables:
        row = connection.execute(text("SELECT value FROM meta WHERE key = 'schema_version'")).first()
        if row is not None and str(row[0]).isdigit():
            found = Found(found.tables, schema_version=int(row[0]))
    if found.is_layerbench and "alembic_version" in tables:
        revision = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
        found = Found(found.tables, found.schema_version, None if revision is None else str(revision))
    return found


def check(found: Found) -> None:
    """Raise Refused when no layerbench may open a database holding this."""
    if not found.is_empty and not found.is_layerbench:
        shown = ", ".join(found.tables[:5])
        if found.tables[5:]:
            shown += f" and {len(found.tables) - 5} more"
        noun = "table" if len(found.tables) == 1 else "tables"
        raise NotLayerbench(f"{noun} {shown}")
    if found.schema_version is not None and found.schema_version > schema.SCHEMA_VERSION:
        raise NewerSchema(f"schema {found.schema_version}, this one reads up to {schema.SCHEMA_VERSION}")
    if found.revision is not None and found.revision not in REVISIONS:
        raise NewerSchema(f"revision {found.revision}, this one knows up to {head()}")


def upgrade(connection: Connection) -> None:
    """The schema at this layerbench's head revision, with a column per registered metric, in
    an empty database or a store of layerbench's (checked again here, in the transaction that
    writes: what was surveyed before may have changed)."""
    found = survey(connection)
    check(found)
    current = found.revision
    if current == head():
        ensure_metric_columns(connection)
        return
    if found.is_empty and connection.dialect.name == "sqlite" and _HEAD_SQLITE.exists():
        # What the migrations make in an empty file, without importing Alembic and running
        # them (0.2 s of every run into a new file); tests/test_migrate.py checks it is that.
        for statement in _HEAD_SQLITE.read_text().split(";\n"):
            if statement.strip():
                connection.exec_driver_sql(statement)
        ensure_metric_columns(connection)
        return
    from alembic import command

    config = _config(connection)
    if current is None and found.is_layerbench:
        # A file of the landed main, before migrations. It made its tables as it first needed
        # them: an older one lacks the later ones, which 0001 has.
        later = [schema.meta, schema.experiment_facts, schema.samples, schema.sentinels]
        schema.metadata.create_all(connection, tables=[t for t in later if t.name not in found.tables])
        command.stamp(config, "0001")
        current = "0001"
    command.upgrade(config, "head")
    ensure_metric_columns(connection)


def ensure_metric_columns(connection: Connection) -> None:
    """A counter registered after the store was made gets its column, empty for old runs (as
    do the sample columns a file of the landed main added only when it first needed them)."""
    wanted = {
        "runs": {name: schema.metric_type(name) for name in metrics.column_names()},
        "samples": {c.name: c.type for c in schema.samples.columns},
    }
    missing = []
    for table, columns in wanted.items():
        present = {c["name"] for c in inspect(connection).get_columns(table)}
        missing += [(table, name, kind) for name, kind in columns.items() if name not in present]
    if not missing:
        return
    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext

    operations = Operations(MigrationContext.configure(connection))
    for table, name, kind in missing:
        operations.add_column(table, Column(name, kind))


def head_sqlite_text(connection: Connection) -> str:
    """The statements that make an SQLite store as this one is, its runs table's metric
    columns and meta and alembic_version rows included: what migrations/head-sqlite.sql holds
    for a store that the migrations just made (write_head_sqlite() writes it)."""
    statements = [
        sql
        for (sql,) in connection.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        )
    ]
    for table in ("meta", "alembic_version"):
        for row in connection.exec_driver_sql(f"SELECT * FROM {table}"):
            values = ", ".join("'" + str(value).replace("'", "''") + "'" for value in row)
            statements.append(f"INSERT INTO {table} VALUES ({values})")
    return "".join(f"{statement};\n" for statement in statements)


def write_head_sqlite() -> Path:
    """migrations/head-sqlite.sql anew, from a file the migrations make (after a new one:
    `python3 -c 'from layerbench.store import migrate; migrate.write_head_sqlite()'`)."""
    import tempfile

    from sqlalchemy import create_engine

    with tempfile.TemporaryDirectory() as scratch:
        made = create_engine(f"sqlite:///{scratch}/head.db")
        with made.begin() as connection:
            _HEAD_SQLITE.unlink(missing_ok=True)  # made by the migrations themselves
            upgrade(connection)
        with made.connect() as connection:
            _HEAD_SQLITE.write_text(head_sqlite_text(connection))
        made.dispose()
    return _HEAD_SQLITE
