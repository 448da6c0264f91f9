"""A bisect: which variant of a stack made it slower. Its comparisons are experiments; the
bisect keeps its variants, the log of its comparisons and what it found (state_json).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "bisects",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("plan_source", sa.Text, nullable=False),
        sa.Column("plan_text", sa.Text, nullable=False),
        sa.Column("good", sa.Text, nullable=False),
        sa.Column("bad", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("started", sa.Text, nullable=False),
        sa.Column("finished", sa.Text),
        sa.Column("pid", sa.Integer),
        sa.Column("owner", sa.Text),
        sa.Column("state_json", sa.Text, nullable=False),
    )
    op.execute("DELETE FROM meta WHERE key = 'schema_version'")
    op.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '3')")


def downgrade() -> None:
    op.drop_table("bisects")
    op.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
