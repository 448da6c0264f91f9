"""A bisect from start to end, or resumed: the variants, the search, the log in the store.

The bisect is stored before its first comparison; its state (each variant's build, each
comparison with its experiment and verdict, then what the search found) is saved after every
step. A bisect that was stopped (Ctrl-C, kill -9, a lost store) resumes with
`layerbench bisect --resume ID`: the search runs again from the start, answered from the log
where a comparison was finished, measuring only the ones that were not."""

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from layerbench.bisect import variants
from layerbench.bisect.oracle import Comparisons
from layerbench.bisect.search import Search
from layerbench.bisect.spec import BisectPlan
from layerbench.core.errors import UserError
from layerbench.session import Session
from layerbench.store import Store, StoreLost, this_machine
from layerbench.store.records import BisectBoundary, BisectState, BisectVariant


def begin(store: Store, plan: BisectPlan, good: str, bad: str, found: list[BisectVariant]) -> int:
    """A new bisect stored, with its variants from good to bad (variants.resolve)."""
    state = BisectState(
        stack=plan.stack,
        workload=plan.workload,
        metric=plan.spec.metric,
        margin=plan.spec.margin,
        probes=plan.spec.probes,
        variants=found,
    )
    name = str(plan.raw.get("name", "bisect"))
    return store.create_bisect(
        name=name, plan_source=plan.source, plan_text=plan.text, good=good, bad=bad, state=state
    )


def resumable(store: Store, ident: int) -> BisectPlan:
    """The stored bisect's plan, once it is known to be one that may resume here."""
    record = store.bisect(ident)
    if record.status == "done":
        raise UserError(
            f"bisect {ident} is complete; nothing to resume (`layerbench report --bisect {ident}`)"
        )
    alive = record.pid is not None and Path(f"/proc/{record.pid}").exists()
    if record.status == "running" and record.owner in (None, this_machine()) and alive:
        raise UserError(f"bisect {ident} is still running (pid {record.pid})")
    return BisectPlan(record.plan_text, record.plan_source)


@contextlib.contextmanager
def checkouts(session: Session, plan: BisectPlan) -> Iterator[variants.Builds]:
    """Where the revisions are built: a directory of the scratch root, gone at the end."""
    with session.scratch.directory("bisect", trial=False) as root:
        yield variants.Builds(plan, root)


def build_good_end(builds: variants.Builds, good: BisectVariant, given: str) -> None:
    """The good end built before the bisect is stored: one that does not build is bad input."""
    builds.checkout(good)
    if good.build not in (None, "ok"):
        raise UserError(f"--good {given} does not build: {good.build}")


def search(
    session: Session, ident: int, plan: BisectPlan, builds: variants.Builds, say: Callable[[str], None]
) -> BisectState:
    """The search to its end (or a stop), its state saved as it goes and its end marked."""
    store = session.store
    assert store is not None
    state = store.bisect(ident).state
    store.save_bisect(ident, state, "running")
    status = "failed"
    try:
        oracle = Comparisons(
            session, plan, state, builds, lambda: store.save_bisect(ident, state), say, ident
        )
        outcome = Search(len(state.variants), oracle, probes=state.probes).run()
        state.ends = outcome.ends
        state.boundaries = [
            BisectBoundary(last=b.last, first=b.first, direction=b.direction, confirmed=b.confirmed)
            for b in outcome.boundaries
        ]
        status = "done"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        with contextlib.suppress(StoreLost):  # a lost store: the resume knows it from the pid
            store.save_bisect(ident, state, status)
    return state
