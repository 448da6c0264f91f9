"""What the bench scripts that read a results file share: its arguments, and one experiment
of it read without changing it (the latest, or the one asked for)."""

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from layerbench.core.errors import UserError
from layerbench.core.runs import RunRecord
from layerbench.store import ExperimentRecord, Store, locate


def arguments(description: str, default_db: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--db", default=default_db)
    parser.add_argument("--experiment", type=int, help="an experiment's id (default: the latest)")
    return parser.parse_args()


def main(doc: str, default_db: str, show: Callable[[str, ExperimentRecord, list[RunRecord]], str]) -> int:
    """A reading script's whole main: the experiment asked for (the latest by default), and
    show(db, experiment, runs) printed; one line and exit status 2 where there is none."""
    args = arguments(doc.splitlines()[0], default_db)
    try:
        chosen, runs = experiment(args.db, args.experiment)
    except UserError as exc:
        print(f"{Path(sys.argv[0]).stem}: {exc}", file=sys.stderr)
        return 2
    print(show(args.db, chosen, runs))
    return 0


def experiment(db: str, ident: int | None) -> tuple[ExperimentRecord, list[RunRecord]]:
    """The experiment and its runs in trial order; UserError saying what is missing."""
    store = Store(locate(db), read_only=True)
    try:
        history = store.history()
        if not history:
            raise UserError(f"no experiment in {db}")
        chosen = ident if ident is not None else max(r.id for r in history)
        if chosen not in {r.id for r in history}:
            raise UserError(f"no experiment {chosen} in {db}")
        return store.experiment(chosen), sorted(store.runs(chosen), key=lambda run: run.trial)
    finally:
        store.close()
