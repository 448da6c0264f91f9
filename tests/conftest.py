"""Fixtures: a scratch root per test, a results DB, and the leak check every test passes."""

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import SESSIONS_PARENT, TEST_ROOT, leftovers, skip_unless_root

# A run's fact that no module declared (layerbench.core.facts) fails the run that stored it,
# in this process and in every layerbench the tests start.
os.environ["LAYERBENCH_CHECK_FACTS"] = "1"

IS_ROOT = os.geteuid() == 0


def pytest_report_header() -> str:
    return f"layerbench tests: scratch under {TEST_ROOT}, running as {'root' if IS_ROOT else 'non-root'}"


@pytest.fixture(scope="session", autouse=True)
def test_root_removed_afterwards() -> Iterator[None]:
    """The session's scratch area goes when the session ends, unless something of ours is
    still in it (a failed test's mounts stay for whoever looks into it)."""
    yield
    if TEST_ROOT.is_dir() and not leftovers(TEST_ROOT):
        shutil.rmtree(TEST_ROOT, ignore_errors=True)
        if TEST_ROOT.parent == SESSIONS_PARENT:
            with contextlib.suppress(OSError):
                SESSIONS_PARENT.rmdir()  # the sessions' common parent, once no session uses it


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fails the test if it leaves a mount, loop device or helper process of ours."""
    before = set(leftovers(TEST_ROOT))
    yield
    # The kernel tears a dead mount namespace down asynchronously: allow it a moment.
    deadline = time.monotonic() + 3
    while True:
        left = [item for item in leftovers(TEST_ROOT) if item not in before]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"the test left these behind: {left}"


@pytest.fixture
def scratch_root(request: pytest.FixtureRequest) -> Iterator[Path]:
    name = request.node.name.replace("/", "_").replace("[", "-").replace("]", "")[:80]
    root = TEST_ROOT / name
    if root.exists():
        shutil.rmtree(root)
    yield root
    if root.exists() and not leftovers(root):
        shutil.rmtree(root)


@pytest.fixture
def needs_root() -> None:
    skip_unless_root()


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Any]:
    """One throwaway PostgreSQL cluster for the session (about 1 s to start)."""
    import postgres

    if reason := postgres.missing():
        pytest.skip(reason)
    with postgres.cluster() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store on each back end: an SQLite file, a new PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "r.db")
    server = request.getfixturevalue("postgres_cluster")
    name = "t" + format(abs(hash(request.node.nodeid)) % 10**12, "d")
    return server.create_database(name)
