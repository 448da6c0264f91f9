"""Create or upgrade a store's schema with Alembic, on an open connection.

A file from before the migrations (meta schema_version 1, no alembic_version) is stamped
with the first revision, then upgraded in place like any other."""

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Connection, inspect, text

from layerbench import metrics
from layerbench.store import schema

_SCRIPTS = Path(__file__).parent / "migrations"


class NewerSchema(Exception):
    """The store was written by a newer layerbench."""


def _config(connection: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    config.attributes["connection"] = connection
    return config


def head() -> str:
    return ScriptDirectory(str(_SCRIPTS)).get_current_head() or ""


def upgrade(connection: Connection) -> None:
    """The schema at this layerbench's head revision, with a column per registered metric."""
    inspector = inspect(connection)
    tables = set(inspector.get_table_names())
    config = _config(connection)
    scripts = ScriptDirectory.from_config(config)
    if "meta" in tables:
        row = connection.execute(text("SELECT value FROM meta WHERE key = 'schema_version'")).first()
        if row is not None and int(row[0]) > schema.SCHEMA_VERSION:
            raise NewerSchema(f"schema {row[0]}, this one reads up to {schema.SCHEMA_VERSION}")
    current = MigrationContext.configure(connection).get_current_revision()
    if current is not None and current not in {s.revision for s in scripts.walk_revisions()}:
        raise NewerSchema(f"revision {current}, this one knows up to {scripts.get_current_head()}")
    if current is None and "experiments" in tables:
        # A file of the landed main, before migrations. It made its tables as it first needed
        # them: an older one lacks the later ones, which 0001 has.
        later = [schema.meta, schema.experiment_facts, schema.samples, schema.sentinels]
        schema.metadata.create_all(connection, tables=[t for t in later if t.name not in tables])
        command.stamp(config, "0001")
        current = "0001"
    if current != scripts.get_current_head():
        command.upgrade(config, "head")
    ensure_metric_columns(connection)


def ensure_metric_columns(connection: Connection) -> None:
    """A counter registered after the store was made gets its column, empty for old runs (as
    do the sample columns a file of the landed main added only when it first needed them)."""
    operations = Operations(MigrationContext.configure(connection))
    wanted = {
        "runs": {name: schema.metric_type(name) for name in metrics.column_names()},
        "samples": {c.name: c.type for c in schema.samples.columns},
    }
    for table, columns in wanted.items():
        present = {c["name"] for c in inspect(connection).get_columns(table)}
        for name, kind in columns.items():
            if name not in present:
                operations.add_column(table, Column(name, kind))
