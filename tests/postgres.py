"""A throwaway PostgreSQL cluster for the tests: initdb and pg_ctl from Debian's postgresql
package, run as the unprivileged `postgres` user (PostgreSQL refuses root), listening only on a
Unix socket in a temporary directory; stopped and removed afterwards."""

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg

# The newest installed server's programs (a path that does not exist where none is: missing() says so).
BIN = next(
    iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)),
    Path("/usr/lib/postgresql/none/bin"),
)
USER = "postgres"


def missing() -> str | None:
    """Why no cluster can start here, or None."""
    if not (BIN / "initdb").exists():
        return "PostgreSQL's server is not installed (Debian package postgresql, in deps/apt.txt)"
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return f"no {USER} user to run the server as"
    if os.geteuid() != 0:
        return "the test starts the server as the postgres user, which needs root"
    return None


class Cluster:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.data = directory / "data"
        self.socket = directory / "socket"

    def _as_postgres(self, *command: str) -> None:
        subprocess.run(
            ["runuser", "-u", USER, "--", *command],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd="/",
        )

    def start(self) -> None:
        self.socket.mkdir(parents=True)
        shutil.chown(self.directory, USER)
        shutil.chown(self.socket, USER)
        self._as_postgres(str(BIN / "initdb"), "-D", str(self.data), "--auth=trust", "-U", USER, "-E", "UTF8")
        self.restart()

    def restart(self) -> None:
        """Start the server of an initialised cluster (again, after stop)."""
        options = f"-k {self.socket} -c listen_addresses='' -c fsync=off -c max_connections=300"
        self._as_postgres(
            str(BIN / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.directory / "log"),
            "-w",
            "-o",
            options,
            "start",
        )

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def url(self, database: str = "postgres", user: str = USER) -> str:
        return f"postgresql://{user}@/{database}?host={self.socket}"

    def admin(self, statement: str) -> None:
        with psycopg.connect(host=str(self.socket), user=USER, dbname="postgres", autocommit=True) as db:
            db.execute(statement)

    def create_database(self, name: str) -> str:
        self.admin(f'CREATE DATABASE "{name}"')
        return self.url(name)


@contextlib.contextmanager
def cluster(parent: Path | None = None) -> Iterator[Cluster]:
    # Outside the test root's per-test directories; the postgres user must reach it.
    directory = Path(tempfile.mkdtemp(prefix="layerbench-pg-", dir=parent))
    os.chmod(directory, 0o755)
    server = Cluster(directory)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
