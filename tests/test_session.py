"""The run session, in process: whatever ends its body (a return, an exception, a Ctrl-C),
the lock is released, the namespace left, the signal handlers back and the store closed;
leftovers that recovery cannot remove refuse it."""

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from layerbench.core.errors import UserError
from layerbench.scratch import Scratch
from layerbench.session import STOPPING, RecoveryIncomplete, Session
from layerbench.store import Store

pytestmark = pytest.mark.usefixtures("needs_root", "saved_handlers")


@pytest.fixture
def saved_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in STOPPING}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.fixture
def closed(monkeypatch: pytest.MonkeyPatch) -> list[Store]:
    """The stores closed during the test."""
    found: list[Store] = []
    close = Store.close

    def recording(store: Store) -> None:
        found.append(store)
        close(store)

    monkeypatch.setattr(Store, "close", recording)
    return found


def _namespace() -> int:
    return os.stat("/proc/self/ns/mnt").st_ino


def _outside() -> dict[str, Any]:
    """What a session changes while it runs and must give back."""
    return {
        "namespace": _namespace(),
        "handlers": {s: signal.getsignal(s) for s in STOPPING},
        "cwd": os.getcwd(),
    }


def _lock_is_free(root: Path) -> bool:
    """Another open of the lock file takes it only if nobody holds it (flock is per open)."""
    scratch = Scratch(root)
    try:
        scratch.lock("the test")
    except UserError:
        return False
    scratch.unlock()
    return True


@pytest.fixture
def before(scratch_root: Path) -> dict[str, Any]:
    if threading.active_count() != 1:
        pytest.skip("a process with threads cannot enter a mount namespace")
    return _outside()


def _inside(session: Session, before: dict[str, Any]) -> None:
    assert _namespace() != before["namespace"] and not session.warnings
    assert all(signal.getsignal(s) is not before["handlers"][s] for s in STOPPING)
    assert not _lock_is_free(session.scratch.root)
    assert session.executor.scratch is session.scratch


def _left(session: Session, before: dict[str, Any], closed: list[Store]) -> None:
    assert _outside() == before
    assert _lock_is_free(session.scratch.root)
    assert closed == [session.store]


def test_a_session_that_ends_well_gives_everything_back(
    scratch_root: Path, tmp_path: Path, before: dict[str, Any], closed: list[Store]
) -> None:
    with Session(scratch_root, "the test", db=tmp_path / "r.db") as session:
        _inside(session, before)
        assert session.store is not None and session.store.latest_experiment_id() is None
    _left(session, before, closed)
    assert (tmp_path / "r.db").exists()  # a store given is kept


def test_an_exception_in_the_body_gives_everything_back(
    scratch_root: Path, before: dict[str, Any], closed: list[Store]
) -> None:
    with pytest.raises(RuntimeError, match="in the body"), Session(scratch_root, "the test") as session:
        _inside(session, before)
        raise RuntimeError("in the body")
    _left(session, before, closed)
    # Without a db the store was a throwaway one: it went with the session.
    assert session.db is not None and session.db.path is not None and not session.db.path.exists()


def test_a_keyboard_interrupt_gives_everything_back(
    scratch_root: Path, before: dict[str, Any], closed: list[Store]
) -> None:
    with pytest.raises(KeyboardInterrupt), Session(scratch_root, "the test") as session:
        _inside(session, before)
        raise KeyboardInterrupt
    _left(session, before, closed)


def test_a_stopping_signal_interrupts_then_hurries_and_the_exit_ignores_late_ones(
    scratch_root: Path, before: dict[str, Any], closed: list[Store], capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(KeyboardInterrupt), Session(scratch_root, "the test") as session:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("the first signal did not interrupt")
        except KeyboardInterrupt:
            assert not session.scratch.hurry
            os.kill(os.getpid(), signal.SIGINT)  # while "tearing down"
            assert session.scratch.hurry
            raise
    assert capfd.readouterr().err == "hurrying the teardown\n"
    assert _namespace() == before["namespace"] and _lock_is_free(scratch_root)
    assert closed == [session.store]
    # Once a stop was asked for the process is only exiting: a late signal is ignored, not fatal.
    assert all(signal.getsignal(s) is signal.SIG_IGN for s in STOPPING)


def test_leftovers_recovery_cannot_remove_refuse_the_session(
    scratch_root: Path, tmp_path: Path, before: dict[str, Any], closed: list[Store]
) -> None:
    crashed = Scratch(scratch_root)
    workdir = crashed.new_dir("trials", "e1-t0")  # journaled, as a killed run leaves it
    (workdir / "file").write_text("x")
    subprocess.run(["chattr", "+i", str(workdir / "file")], check=True)
    reported: list[str] = []
    try:
        with (
            pytest.raises(RecoveryIncomplete) as refused,
            Session(scratch_root, "the test", db=tmp_path / "r.db", report=reported.append),
        ):
            raise AssertionError("the session ran on top of leftovers")
    finally:
        subprocess.run(["chattr", "-i", str(workdir / "file")], check=True)
    message = str(refused.value)
    assert "\n" not in message and str(workdir) in message and "`layerbench clean" in message
    assert refused.value.exit_status == 1
    assert _outside() == before and _lock_is_free(scratch_root)
    assert len(closed) == 1  # the store was opened before the recovery, and closed after it
    Scratch(scratch_root).clean()


def test_a_bad_db_is_refused_before_the_scratch_root_is_made(
    scratch_root: Path, tmp_path: Path, before: dict[str, Any]
) -> None:
    not_a_store = tmp_path / "notes.db"
    not_a_store.write_text("not a database\n")
    with pytest.raises(UserError), Session(scratch_root, "the test", db=not_a_store):
        raise AssertionError("a session with a bad store")
    assert not scratch_root.exists()
    assert _outside() == before


def test_not_root_is_refused_before_anything(
    scratch_root: Path, before: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(UserError, match="needs root"), Session(scratch_root, "the test"):
        raise AssertionError("a session without root")
    assert not scratch_root.exists()
    assert _outside() == before
