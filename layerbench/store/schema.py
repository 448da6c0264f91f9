"""The results schema as the store reads and writes it (SQLAlchemy Core), for both back ends.

Alembic's migrations (migrations/) create and upgrade it in a file or a database; the
tables here name the same columns (tests/test_migrate.py checks that they agree). The runs
table's metric columns come from the metric registry: a counter registered later gets its
column when a store opens for writing (`ensure_metric_columns`), empty for the runs stored
before it; a store opened read-only reads it as empty.
"""

import functools

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Integer,
    MetaData,
    Table,
    Text,
)
from sqlalchemy.types import TypeEngine

from layerbench.core import metrics
from layerbench.core.runs import IDENTITY

# The meta table's schema_version: what a layerbench from before the migrations reads to
# refuse a newer file with one line. It follows the migrations (0003 sets 3).
SCHEMA_VERSION = 3

# SQLite's INTEGER is 64-bit; PostgreSQL's is not, and byte counts overflow 2**31.
WIDE_INTEGER = BigInteger().with_variant(Integer(), "sqlite")

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
_SAMPLE_TYPES: dict[str, TypeEngine] = {
    "t_s": Float(),
    "dt_s": Float(),
    "cpu_busy_pct": Float(),
    "cpu_iowait_pct": Float(),
}

RUN_FIELDS = IDENTITY


def metric_type(name: str) -> TypeEngine:
    return WIDE_INTEGER if metrics.BY_NAME[name].integer else Float()


def run_columns() -> tuple[str, ...]:
    """The runs table's columns a run row carries, the metrics' from the registry."""
    return (*RUN_FIELDS, *metrics.column_names(), "units", "unit", "throughput")


metadata = MetaData()

meta = Table("meta", metadata, Column("key", Text, primary_key=True), Column("value", Text, nullable=False))

fleets = Table(
    "fleets",
    metadata,
    Column("id", Text, primary_key=True),
    Column("name", Text, nullable=False),
    Column("plan_source", Text, nullable=False),
    Column("started", Text, nullable=False),
    Column("reference", Text, nullable=False),  # the host the others are compared against
    Column("hosts_json", Text, nullable=False),
)

experiments = Table(
    "experiments",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("plan_source", Text, nullable=False),
    Column("plan_text", Text, nullable=False),
    Column("plan_json", Text, nullable=False),
    Column("seed", Integer, nullable=False),
    Column("baseline", Text, nullable=False),
    Column("started", Text, nullable=False),
    Column("finished", Text),
    Column("host_json", Text, nullable=False),
    Column("stacks_json", Text, nullable=False, server_default="{}"),
    Column("warnings_json", Text, nullable=False, server_default="[]"),
    Column("version", Text, nullable=False),
    Column("pid", Integer),
    # 0002: the fleet an experiment belongs to, the host it ran on, the machine of the
    # process that owns a running one (whose pid the store checks), why it stopped.
    Column("fleet", Text),
    Column("host_name", Text),
    Column("owner", Text),
    Column("status_reason", Text),
)


@functools.cache
def runs_with(names: tuple[str, ...]) -> Table:
    """The runs table with these metric columns."""
    # Its own MetaData: one runs table per set of registered metrics (a test may register more).
    return Table(
        "runs",
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("experiment_id", Integer, nullable=False),
        Column("trial", Integer, nullable=False),
        Column("stack", Text, nullable=False),
        Column("workload", Text, nullable=False),
        Column("rep", Integer, nullable=False),
        Column("warmup", Integer, nullable=False),
        Column("status", Text, nullable=False),
        Column("error", Text),
        Column("exit_code", Integer),
        Column("started", Text, nullable=False),
        *(Column(name, metric_type(name)) for name in names),
        Column("units", Float),
        Column("unit", Text),
        Column("throughput", Float),
        Column("devices_json", Text, nullable=False, server_default="{}"),
        Column("facts_json", Text, nullable=False, server_default="{}"),
    )


def runs() -> Table:
    """The runs table with a column per metric registered now."""
    return runs_with(tuple(metrics.column_names()))


experiment_facts = Table(
    "experiment_facts",
    metadata,
    Column("experiment_id", Integer, primary_key=True),
    Column("key", Text, primary_key=True),
    Column("value_json", Text, nullable=False),
)

samples = Table(
    "samples",
    metadata,
    Column("run_id", Integer, nullable=False),
    *(
        Column(name, _SAMPLE_TYPES.get(name, WIDE_INTEGER), nullable=name not in ("t_s", "dt_s"))
        for name in SAMPLE_COLUMNS
    ),
)

sentinels = Table(
    "sentinels",
    metadata,
    Column("experiment_id", Integer, primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("taken", Text, nullable=False),
    Column("after_trial", Integer),
    Column("cost_s", Float, nullable=False),
    Column("parts_json", Text, nullable=False),
)


# 0003: a bisect, the comparisons of which are experiments of their own.
bisects = Table(
    "bisects",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", Text, nullable=False),
    Column("plan_source", Text, nullable=False),
    Column("plan_text", Text, nullable=False),
    Column("good", Text, nullable=False),
    Column("bad", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("started", Text, nullable=False),
    Column("finished", Text),
    Column("pid", Integer),
    Column("owner", Text),
    Column("state_json", Text, nullable=False),
)
