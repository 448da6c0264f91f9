"""A fleet: experiments of one plan on many hosts, tied by a fleet id.

Experiments gain the fleet, the host they ran on, the machine of their owning process (a
shared database holds running experiments of other machines, whose pids mean nothing here)
and why one stopped (`interrupted`, reason `host lost`).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fleets",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("plan_source", sa.Text, nullable=False),
        sa.Column("started", sa.Text, nullable=False),
        sa.Column("reference", sa.Text, nullable=False),
        sa.Column("hosts_json", sa.Text, nullable=False),
    )
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("fleet", sa.Text))
        batch.add_column(sa.Column("host_name", sa.Text))
        batch.add_column(sa.Column("owner", sa.Text))
        batch.add_column(sa.Column("status_reason", sa.Text))
    op.create_index("experiments_by_fleet", "experiments", ["fleet"])
    op.execute("DELETE FROM meta WHERE key = 'schema_version'")
    op.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '2')")


def downgrade() -> None:
    op.drop_index("experiments_by_fleet", "experiments")
    with op.batch_alter_table("experiments") as batch:
        for name in ("status_reason", "owner", "host_name", "fleet"):
            batch.drop_column(name)
    op.drop_table("fleets")
    op.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
