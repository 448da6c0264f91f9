"""The command line's signal handling (the session's two-stage stop), in process."""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from helpers import REPO

from layerbench import cli, session

STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture
def saved_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in STOPPING}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _refuse(*args: object, **kwargs: object) -> None:
    raise AssertionError("printed through rich from inside a signal handler")


@pytest.mark.parametrize("second", STOPPING, ids=lambda s: s.name)
def test_a_second_signal_hurries_without_touching_rich(
    saved_handlers: None, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], second: int
) -> None:
    # The second signal can land between any two bytecodes of the teardown, including inside
    # rich's own print or one of its lazy imports: its handler must not re-enter rich.
    scratch = SimpleNamespace(hurry=False)
    monkeypatch.setattr(cli.console, "print", _refuse)
    hurry = lambda: setattr(scratch, "hurry", True)  # noqa: E731
    with pytest.raises(KeyboardInterrupt), session.stopping_on_signals(hurry):
        try:
            os.kill(os.getpid(), signal.SIGINT)  # its handler runs as the call returns
            raise AssertionError("the first signal did not interrupt")
        except KeyboardInterrupt:
            os.kill(os.getpid(), second)  # while "tearing down"
            assert scratch.hurry
            raise
    assert capfd.readouterr().err == "hurrying the teardown\n"
    # Once interrupted the run is only exiting: a late signal is ignored, not fatal.
    assert all(signal.getsignal(s) is signal.SIG_IGN for s in STOPPING)


def test_no_signal_leaves_the_handlers_as_they_were(saved_handlers: None) -> None:
    before = {s: signal.getsignal(s) for s in STOPPING}
    with session.stopping_on_signals(lambda: None):
        assert all(signal.getsignal(s) is not before[s] for s in STOPPING)
    assert {s: signal.getsignal(s) for s in STOPPING} == before


def test_the_command_line_starts_without_scipy() -> None:
    """scipy.stats takes 0.45-0.7 s to import: the commands that compute no statistics
    (clean, history, host, a refused database) must not pay it at every start."""
    probe = "import sys, layerbench.cli; print(sorted(m for m in sys.modules if m.startswith('scipy.stats')))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.strip() == "[]", done.stdout
