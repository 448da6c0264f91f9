"""The store's schema under Alembic: files of the landed main migrate in place and report the
same figures; the migrations and schema.py agree on both back ends; PostgreSQL takes several
writers at once; a bad --db gets one line."""

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, cli
from sqlalchemy import create_engine, inspect, text

from layerbench import reports
from layerbench.core.errors import UserError
from layerbench.store import Store, migrate, schema

FIXTURES = Path(__file__).parent / "fixtures"
LANDED = FIXTURES / "landed-main-2026-12-01.db"  # written by main at c0d2bbc, before migrations


def test_a_file_of_the_landed_main_migrates_in_place_and_reports_the_same_figures(tmp_path: Path) -> None:
    copy = tmp_path / "landed.db"
    shutil.copy(LANDED, copy)
    before = sqlite3.connect(copy).execute("SELECT name FROM sqlite_master WHERE name = 'alembic_version'")
    assert before.fetchall() == []
    as_it_was = list(sqlite3.connect(copy).iterdump())
    store = Store(copy)  # opened for writing, as `run` opens it
    assert store.upgraded is not None and store.upgraded.before == "pre-migration schema 1"
    assert store.upgraded.backup is not None and store.upgraded.backup.parent == tmp_path
    assert list(sqlite3.connect(store.upgraded.backup).iterdump()) == as_it_was
    document = json.loads(reports.render(reports.gather(store, 1), "json"))
    expected = json.loads((FIXTURES / "landed-main-2026-12-01.summary.json").read_text())
    # The same figures as the landed main reported; fields added to a row since (the bound
    # an interval supports) are new information, not a changed figure.
    assert [
        {k: row[k] for k in landed}
        for row, landed in zip(document["summary"], expected["summary"], strict=True)
    ] == expected["summary"]
    assert len(store.runs(1)) == 10 and len(store.sentinels(1)) == 11
    assert store.experiment(1).facts == {"probe": {"x": 1}}
    store.close()
    connection = sqlite3.connect(copy)
    assert connection.execute("SELECT version_num FROM alembic_version").fetchone()[0] == migrate.head()
    assert connection.execute("SELECT value FROM meta").fetchone()[0] == str(schema.SCHEMA_VERSION)
    again = Store(copy)  # a second open finds it at head and changes nothing
    assert again.upgraded is None and len(list(tmp_path.glob("landed.db.*.bak"))) == 1


def test_the_migrations_make_the_tables_the_store_reads_and_writes(store_location: str) -> None:
    store = Store(store_location)
    found = inspect(store.engine)
    tables = [
        schema.meta,
        schema.fleets,
        schema.experiments,
        schema.runs(),
        schema.experiment_facts,
        schema.samples,
        schema.sentinels,
    ]
    for table in tables:
        columns = {c["name"] for c in found.get_columns(table.name)}
        assert columns == {c.name for c in table.columns}, table.name
    store.close()


def test_a_store_of_an_unknown_revision_is_refused_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    store = Store(path)
    with store.engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    store.close()
    with pytest.raises(UserError, match=r"written by a newer layerbench \(revision 0099"):
        Store(path)


WRITER = """
import sys
from layerbench.store import Store, run_columns
store = Store(sys.argv[1])
ident = store.create_experiment(name=sys.argv[2], plan_source="p", plan_text="", plan={}, seed=1,
    baseline="a", host={}, version="0", warnings=[], fleet="f", host_name=sys.argv[2])
for trial in range(40):
    run = dict.fromkeys(run_columns(), 1) | {"trial": trial, "stack": "a", "workload": "w", "status": "ok",
        "error": None, "unit": "bytes", "started": "now", "warmup": 0}
    store.add_run_row(ident, run, {}, {}, [{"t_s": 0.0, "dt_s": 0.1}])
print(ident)
"""


def test_postgresql_takes_the_runs_of_several_writers_at_once(postgres_cluster) -> None:
    url = postgres_cluster.create_database("concurrent")
    Store(url).close()  # migrated once; the writers then only write
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, f"host{n}"],
            stdout=subprocess.PIPE,
            text=True,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        )
        for n in range(4)
    ]
    ids = [int(w.communicate(timeout=120)[0]) for w in writers]
    assert all(w.returncode == 0 for w in writers)
    store = Store(url)
    assert sorted(store.run_count(i) for i in ids) == [40] * 4
    assert sorted(r.trial for r in store.runs(ids[0])) == list(range(40))
    assert {e.host for e in store.history()} == {f"host{n}" for n in range(4)}


def test_bad_database_urls_get_one_line_and_exit_2_without_the_password(postgres_cluster) -> None:
    socket = postgres_cluster.socket
    cases = {
        "postgresql://u:s3cret@host:port/db": "not a database URL",
        "mysql://u:s3cret@localhost/db": "a mysql database is not supported",
        f"postgresql://nobody:s3cret@/nodb?host={socket}": "nobody",
    }
    for url, expected in cases.items():
        done = cli("report", "--db", url)
        assert done.returncode == 2, (url, done.stderr)
        assert done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr
        assert "s3cret" not in done.stderr


def test_a_role_without_the_right_to_create_the_schema_gets_one_line(postgres_cluster) -> None:
    postgres_cluster.admin("CREATE ROLE reader LOGIN")
    postgres_cluster.create_database("locked")
    with pytest.raises(UserError, match="permission denied for schema public"):
        Store(postgres_cluster.url("locked", user="reader"))
    # A command that only reads creates nothing, so it needs no such right.
    done = cli("history", "--db", postgres_cluster.url("locked", user="reader"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "holds no layerbench results" in done.stderr


def test_the_revisions_named_are_the_scripts_chain() -> None:
    """migrate.REVISIONS spares every open of a current store Alembic's import; a new
    migration script must be named there too, in order, or stores stop at the old head."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory(str(Path(migrate.__file__).parent / "migrations"))
    chain = [script.revision for script in scripts.walk_revisions()][::-1]
    assert tuple(chain) == migrate.REVISIONS


def _alembic_imported_by(opening: str) -> str:
    """The alembic modules a fresh interpreter imported doing `opening` (Python statements)."""
    probe = (
        f"import sys; from layerbench.store import Store; {opening}; "
        "print(sorted(m for m in sys.modules if m.startswith('alembic')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    return done.stdout.strip() + done.stderr


def test_opening_a_current_store_does_not_import_alembic(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    Store(db).close()  # made at head
    opening = f"Store({str(db)!r}).close(); Store({str(db)!r}, read_only=True).close()"
    assert _alembic_imported_by(opening) == "[]"


def test_a_new_sqlite_store_is_what_the_migrations_make_and_needs_no_alembic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new file gets migrations/head-sqlite.sql: the same tables, columns, indexes and
    rows as the migrations make (after a new migration, migrate.write_head_sqlite())."""
    assert _alembic_imported_by(f"Store({str(tmp_path / 'fresh.db')!r}).close()") == "[]"
    monkeypatch.setattr(migrate, "_HEAD_SQLITE", tmp_path / "none.sql")  # the migrations, then
    Store(tmp_path / "migrated.db").close()
    made = {}
    for name in ("fresh", "migrated"):
        engine = create_engine(f"sqlite:///{tmp_path / name}.db")
        with engine.connect() as connection:
            made[name] = migrate.head_sqlite_text(connection)
        engine.dispose()
    assert made["fresh"] == made["migrated"], "run migrate.write_head_sqlite() after a new migration"
    assert "INSERT INTO alembic_version VALUES ('" + migrate.head() + "')" in made["fresh"]
    assert "CREATE INDEX runs_by_experiment" in made["fresh"]
