"""Alembic's environment: the store hands it an open connection (store/migrate.py)."""

from alembic import context

connection = context.config.attributes["connection"]
# Batch mode lets the same migration alter a table on SQLite (which rebuilds it) and PostgreSQL.
context.configure(connection=connection, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
