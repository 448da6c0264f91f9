"""One run session, the frame every caller that builds stacks runs in:

    with Session(scratch_root, "layerbench run", db=db) as session:
        data = session.run_plan(text)

On the way in, in this order: root, a private mount namespace, the two-stage stop on
signals, the scratch root checked (before the store is made), the store (a bad --db is
refused before the scratch root is touched), the scratch root and its lock, recovery of what
an earlier run left (a problem it cannot remove refuses the session), and the executor. On
the way out, whatever happened in the body (an exception, a Ctrl-C), the same in reverse:
the scratch root tidied and unlocked, the store closed, the signal handlers put back, the
namespace left."""

import contextlib
import enum
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType, TracebackType

from layerbench.core.errors import UserError
from layerbench.executors.base import Executor
from layerbench.executors.local import LocalExecutor
from layerbench.experiment import Experiment
from layerbench.linux import namespace
from layerbench.plan import parse_plan
from layerbench.reports import base as reports
from layerbench.scratch import Scratch, check_root
from layerbench.store import Location, Store, locate

# SIGHUP: the ssh session that started the run was closed.
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
HURRYING = b"hurrying the teardown\n"


class MountNamespace(enum.Enum):
    """Where the session's mounts are made."""

    PRIVATE = "a mount namespace of the session's own, or no session"
    PRIVATE_IF_POSSIBLE = "a namespace of its own; the host's (with a warning) where none can be made"
    HOST = "the host's mount namespace (visible in its mount table)"


class RecoveryIncomplete(UserError):
    """What an earlier run left could not all be removed: no run starts on top of it.
    Exit status 1, as for `layerbench clean` that cannot remove something."""

    exit_status = 1

    def __init__(self, root: Path, problems: list[str]) -> None:
        super().__init__(
            f"cannot remove what an earlier run left: {'; '.join(problems)}; "
            f"once that is dealt with, `layerbench clean --scratch {root}` removes the rest"
        )
        self.problems = problems


def require_root(
    who: str = "layerbench",
    needs: str = "to mount file systems and drop caches",
    hint: str = "run it as root",
) -> None:
    """One line, before anything is touched, when this process is not root."""
    if os.geteuid() != 0:
        raise UserError(f"{who} needs root {needs}; {hint}")


@contextlib.contextmanager
def stopping_on_signals(hurry: Callable[[], None]) -> Iterator[None]:
    """First Ctrl-C (or SIGTERM, SIGHUP): KeyboardInterrupt, to stop, tear down and keep the
    finished runs. A second one while tearing down: hurry() (lazy unmounts, SIGKILL helpers),
    which still leaves nothing behind. The handlers in place before come back on the way out,
    but once a stop was asked for the process is only exiting: then the signals stay ignored,
    so that a late one does not turn a clean exit 130 into death by signal."""
    count = 0

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal count
        count += 1
        if count == 1:
            raise KeyboardInterrupt
        hurry()
        # A raw write, never rich's console: this handler runs between any two bytecodes of
        # the teardown, which may be inside rich itself (a print, a lazy import of its
        # tables), and re-entering it there fails.
        os.write(sys.stderr.fileno(), HURRYING)

    previous = {signum: signal.signal(signum, handler) for signum in STOPPING}
    # A Ray worker blocks SIGINT, and a blocked signal stays blocked across fork and exec:
    # without this a fleet host's agent would never see one (nor would the commands it starts).
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, signal.SIG_IGN if count else old)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def lock_waiting(scratch: Scratch, holder: str, wait_s: float) -> None:
    """The scratch root's lock, waiting up to wait_s for another holder to let it go."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            scratch.lock(holder)
            return
        except UserError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def run_plan(
    text: str, store: Store, executor: Executor, source: str = "builtin:selftest"
) -> reports.ReportData:
    """One experiment, start to end, as `layerbench run` does it (without the report)."""
    experiment = Experiment(parse_plan(text, source), store, executor)
    experiment.prepare([])
    experiment.run()
    assert experiment.id is not None
    return reports.gather(store, experiment.id)


def _silent(line: str) -> None:
    pass


class Session:
    """See the module's docstring. After entering: scratch, executor, store (None without
    one), db (where the store is), warnings (to store with an experiment)."""

    def __init__(
        self,
        scratch_root: Path,
        holder: str,
        *,
        db: "Location | Path | str | None" = None,
        with_store: bool = True,
        create_store: bool = True,
        read_only_store: bool = False,
        mounts: MountNamespace = MountNamespace.PRIVATE_IF_POSSIBLE,
        allowed_devices: frozenset[str] = frozenset(),
        force: bool = False,
        lock_wait_s: float = 0.0,
        root_hint: str = "run it as root",
        report: Callable[[str], None] = _silent,
    ) -> None:
        """holder: who holds the lock, for a refused second run. db: the store; None, a
        throwaway one in a temporary directory (with_store=False: none). report: one line
        each for what the session did that the user should know (recovered leftovers, an
        upgraded store, killed experiments marked)."""
        self.scratch_root = scratch_root
        self.holder = holder
        self.db = None if db is None else locate(db)
        self.with_store = with_store
        self.create_store = create_store
        self.read_only_store = read_only_store
        self.mounts = mounts
        self.allowed_devices = allowed_devices
        self.force = force
        self.lock_wait_s = lock_wait_s
        self.root_hint = root_hint
        self.report = report
        self.warnings: list[str] = []
        self.store: Store | None = None
        self._scratch: Scratch | None = None
        self._executor: LocalExecutor | None = None
        self._exits = contextlib.ExitStack()

    @property
    def scratch(self) -> Scratch:
        assert self._scratch is not None, "the session is not entered"
        return self._scratch

    @property
    def executor(self) -> LocalExecutor:
        assert self._executor is not None, "the session is not entered"
        return self._executor

    def __enter__(self) -> "Session":
        with contextlib.ExitStack() as stack:
            require_root(hint=self.root_hint)
            self._enter_namespace(stack)
            stack.enter_context(stopping_on_signals(self._hurry))
            check_root(self.scratch_root)
            self.store = self._open_store(stack)
            self._scratch = stack.enter_context(Scratch(self.scratch_root))
            lock_waiting(self._scratch, self.holder, self.lock_wait_s)
            self._recover()
            self._executor = LocalExecutor(
                self._scratch, allowed_devices=self.allowed_devices, force=self.force
            )
            stack.callback(self._executor.close)  # before the scratch root is unlocked
            self._exits = stack.pop_all()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._exits.__exit__(kind, error, trace)

    def _hurry(self) -> None:
        if self._scratch is not None:
            self._scratch.hurry = True

    def _enter_namespace(self, stack: contextlib.ExitStack) -> None:
        if self.mounts is MountNamespace.HOST:
            return
        reason = stack.enter_context(namespace.private_mount_namespace())
        if reason is None:
            return
        if self.mounts is MountNamespace.PRIVATE:
            raise UserError(f"no private mount namespace: {reason}")
        self.warnings.append(f"mounts are in the host's namespace: {reason}")

    def _open_store(self, stack: contextlib.ExitStack) -> Store | None:
        if not self.with_store:
            return None
        if self.db is None:
            directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="layerbench-session-"))
            self.db = locate(Path(directory) / "results.db")
        store = stack.enter_context(Store(self.db, create=self.create_store, read_only=self.read_only_store))
        if line := store.upgrade_line():
            self.report(line)
        return store

    def _recover(self) -> None:
        """What an earlier run left in the scratch root goes; anything that stays refuses the
        session. Experiments whose process died become interrupted."""
        recovery = self.scratch.clean()
        for line in recovery.removed:
            self.report(f"recovered from an earlier run: {line}")
        if recovery.problems:
            raise RecoveryIncomplete(self.scratch.root, recovery.problems)
        if self.store is not None and not self.store.read_only:
            for ident in self.store.mark_running_interrupted():
                self.report(f"experiment {ident} was killed; marked interrupted")

    def run_plan(self, text: str, source: str = "builtin:selftest") -> reports.ReportData:
        """One experiment from a plan's text into the session's store (see run_plan)."""
        assert self.store is not None, "a session without a store runs no experiment"
        return run_plan(text, self.store, self.executor, source)
