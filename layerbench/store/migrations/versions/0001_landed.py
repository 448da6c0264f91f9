"""The schema of the results file before migrations (meta schema_version 1).

A file written then is stamped with this revision, not created again; a new file or
database starts here. Frozen: the metric columns are those registered at the time.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_WIDE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_METRICS = (
    "wall_s:f user_s:f sys_s:f cpu_pct:f maxrss_kb:i minflt:i majflt:i inblock:i oublock:i nvcsw:i"
    " nivcsw:i read_bytes:i write_bytes:i read_ios:i write_ios:i helper_cpu_s:f psi_io_some_s:f"
    " psi_io_full_s:f psi_cpu_some_s:f psi_memory_some_s:f kthread_cpu_s:f vm_majfault:i"
    " vm_written_bytes:i dirty_peak_bytes:i disk_write_bytes:i disk_busy_pct:f disk_wait_ms:f"
    " disk_in_flight_peak:i read_iops:f read_bw_bytes:f read_io_bytes:i read_clat_mean_ns:f"
    " read_clat_p50_ns:f read_clat_p90_ns:f read_clat_p99_ns:f read_clat_p999_ns:f write_iops:f"
    " write_bw_bytes:f write_io_bytes:i write_clat_mean_ns:f write_clat_p50_ns:f write_clat_p90_ns:f"
    " write_clat_p99_ns:f write_clat_p999_ns:f fio_runtime_s:f"
)


def _metric_columns() -> list[sa.Column]:
    columns = []
    for entry in _METRICS.split():
        name, kind = entry.split(":")
        columns.append(sa.Column(name, _WIDE if kind == "i" else sa.Float()))
    return columns


def _create_runs() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("experiment_id", sa.Integer, sa.ForeignKey("experiments.id"), nullable=False),
        sa.Column("trial", sa.Integer, nullable=False),
        sa.Column("stack", sa.Text, nullable=False),
        sa.Column("workload", sa.Text, nullable=False),
        sa.Column("rep", sa.Integer, nullable=False),
        sa.Column("warmup", sa.Integer, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("exit_code", sa.Integer),
        sa.Column("started", sa.Text, nullable=False),
        *_metric_columns(),
        sa.Column("units", sa.Float),
        sa.Column("unit", sa.Text),
        sa.Column("throughput", sa.Float),
        sa.Column("devices_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("facts_json", sa.Text, nullable=False, server_default="{}"),
        sa.CheckConstraint("status IN ('ok', 'failed')", name="run_status_known"),
    )
    op.create_index("runs_by_experiment", "runs", ["experiment_id", "stack", "workload"])


def upgrade() -> None:
    op.create_table(
        "meta", sa.Column("key", sa.Text, primary_key=True), sa.Column("value", sa.Text, nullable=False)
    )
    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("plan_source", sa.Text, nullable=False),
        sa.Column("plan_text", sa.Text, nullable=False),
        sa.Column("plan_json", sa.Text, nullable=False),
        sa.Column("seed", sa.Integer, nullable=False),
        sa.Column("baseline", sa.Text, nullable=False),
        sa.Column("started", sa.Text, nullable=False),
        sa.Column("finished", sa.Text),
        sa.Column("host_json", sa.Text, nullable=False),
        sa.Column("stacks_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("warnings_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("pid", sa.Integer),
        sa.CheckConstraint("status IN ('running', 'done', 'interrupted', 'failed')", name="status_known"),
    )
    _create_runs()
    op.create_table(
        "experiment_facts",
        sa.Column("experiment_id", sa.Integer, sa.ForeignKey("experiments.id"), primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("value_json", sa.Text, nullable=False),
    )
    op.create_table(
        "samples",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("t_s", sa.Float, nullable=False),
        sa.Column("dt_s", sa.Float, nullable=False),
        sa.Column("read_bytes", _WIDE),
        sa.Column("write_bytes", _WIDE),
        sa.Column("disk_read_bytes", _WIDE),
        sa.Column("disk_write_bytes", _WIDE),
        sa.Column("cpu_busy_pct", sa.Float),
        sa.Column("cpu_iowait_pct", sa.Float),
        sa.Column("dirty_bytes", _WIDE),
        sa.Column("disk_in_flight", _WIDE),
    )
    op.create_index("samples_by_run", "samples", ["run_id"])
    op.create_table(
        "sentinels",
        sa.Column("experiment_id", sa.Integer, sa.ForeignKey("experiments.id"), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("taken", sa.Text, nullable=False),
        sa.Column("after_trial", sa.Integer),
        sa.Column("cost_s", sa.Float, nullable=False),
        sa.Column("parts_json", sa.Text, nullable=False),
    )
    op.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '1')")


def downgrade() -> None:
    for table in ("sentinels", "samples", "experiment_facts", "runs", "experiments", "meta"):
        op.drop_table(table)
