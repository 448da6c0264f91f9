"""The command line: parse arguments, call one function, render. Nothing else."""

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from layerbench import __version__, reports
from layerbench.analysis.compare import compare, load_side, trends
from layerbench.core.errors import UserError
from layerbench.core.sizes import parse_size
from layerbench.cross_experiments import add_parsers as add_browse_parsers
from layerbench.cross_experiments import cmd_serve, cmd_trend
from layerbench.experiment import Experiment, Trial
from layerbench.fleet import FLEET_ID_LENGTH
from layerbench.observe.busy import BusyWindow
from layerbench.plan import Plan, expansion, footprint, load_plan
from layerbench.reports import bisect as bisect_report
from layerbench.reports import comparison as comparison_report
from layerbench.reports import contents, csv_export, document
from layerbench.reports import history as history_report
from layerbench.reports import text as text_report
from layerbench.scratch import DEFAULT_ROOT, Scratch, check_root
from layerbench.selftest import doctor, repeatability, validity
from layerbench.session import MountNamespace, Session, require_root
from layerbench.stacks.base import Layer, LayerOptions
from layerbench.stacks.base import load_kinds as load_layer_kinds
from layerbench.store import Location, NoResults, Store, StoreLost, locate, migrate
from layerbench.store.records import TrialResult
from layerbench.workloads.base import Workload, WorkloadOptions
from layerbench.workloads.base import load_kinds as load_workload_kinds

DEFAULT_DB = "layerbench.db"
DB_HELP = "results: an SQLite file, or a database URL (postgresql://USER@HOST/DB)"
console = Console(stderr=True, highlight=False)
# Reports are wide: when piped or redirected, do not squeeze them into 80 columns.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def _credentials_option(parser: argparse.ArgumentParser, what: str = "") -> None:
    from layerbench.fleet.credentials import DEFAULT

    parser.add_argument(
        "--credentials",
        type=Path,
        metavar="DIR",
        help=f"{what}the fleet's credentials, a directory of mode 0700 (default: {DEFAULT})",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="layerbench",
        description="What does this storage layer cost me, and why? Builds each storage stack "
        "of a plan, runs real workloads in it, and reports each layer's cost against a baseline.",
    )
    parser.add_argument("--version", action="version", version=f"layerbench {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run a plan (the built-in default without one)")
    run.add_argument("plan", nargs="?", help="plan TOML file (default: the built-in experiment)")
    run.add_argument("--db", type=str, default=DEFAULT_DB, help=DB_HELP)
    run.add_argument("--scratch", type=Path, default=DEFAULT_ROOT, help="scratch root")
    run.add_argument("--reps", type=int, help="measured repetitions (overrides the plan)")
    run.add_argument(
        "--budget",
        help="a time budget (90s, 8m, 1h; off): rounds added where comparisons are undecided",
    )
    run.add_argument("--quick", action="store_true", help="the plan's small sizes and reps")
    run.add_argument(
        "--no-namespace",
        action="store_true",
        help="mount in the host's mount namespace (visible in its mount table)",
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar, no final report")
    run.add_argument(
        "--resume",
        type=_experiment_or_fleet,
        metavar="EXPERIMENT",
        help="run only the trials an interrupted experiment is missing "
        "(with --fleet: an experiment, or a fleet's id for every unfinished host of that fleet)",
    )
    run.add_argument(
        "--allow-device",
        action="append",
        default=[],
        metavar="/dev/X",
        help="let an image layer format this real block device (repeatable)",
    )
    run.add_argument(
        "--force", action="store_true", help="with --allow-device: format it even if it holds a file system"
    )
    run.add_argument(
        "--fleet",
        metavar="HEAD",
        help="run on the hosts of the Ray cluster at HEAD (HOST:PORT), one experiment each",
    )
    run.add_argument("--hosts", help="with --fleet: the hosts, by name, comma-separated (default: all)")
    _credentials_option(run, "with --fleet: ")

    hosting = commands.add_parser("host", help="the hosts of a fleet: start its head, join it, list them")
    host_commands = hosting.add_subparsers(dest="host_command", required=True, metavar="HOST_COMMAND")
    starting = host_commands.add_parser(
        "head", help="start a fleet's head on this machine (Ray, no dashboard)"
    )
    starting.add_argument(
        "--bind", required=True, help="the address of the private interface to listen on (only there)"
    )
    starting.add_argument("--port", type=int, default=6379)
    _credentials_option(starting, "created there if it holds none: ")
    joining = host_commands.add_parser("join", help="make this machine a host of the fleet at HEAD (as root)")
    joining.add_argument("head", help="the head's HOST:PORT, given explicitly")
    joining.add_argument(
        "--name", default=platform.node(), help="the host's name in the fleet (default: hostname)"
    )
    joining.add_argument("--scratch", type=Path, default=DEFAULT_ROOT, help="its scratch root")
    joining.add_argument(
        "--bind",
        help="the address of this machine's private interface, to listen on only "
        "(default: its address on the route to the head)",
    )
    _credentials_option(joining, "a copy of the head's: ")
    listing = host_commands.add_parser("list", help="the joined hosts, what they are, whether busy")
    listing.add_argument("head", help="the head's HOST:PORT")
    _credentials_option(listing)

    check = commands.add_parser("check", help="validate a plan and show its trials, without running")
    check.add_argument("plan", nargs="?", help="plan TOML file (default: the built-in experiment)")
    check.add_argument("--reps", type=int)
    check.add_argument("--quick", action="store_true")
    check.add_argument("--budget", help="a time budget (90s, 8m, 1h; off), as run takes it")
    check.add_argument("--scratch", type=Path, default=DEFAULT_ROOT, help="scratch root (its free space)")

    report = commands.add_parser("report", help="report an experiment (the newest by default)")
    report.add_argument("experiment", nargs="?", type=int, help="experiment id")
    report.add_argument("--db", type=str, default=DEFAULT_DB, help=DB_HELP)
    report.add_argument("--format", default="text", choices=document.load_formats("experiment"))
    report.add_argument("-o", "--output", type=Path, help="write to this file")
    report.add_argument("--bisect", type=int, metavar="BISECT", help="instead: a bisect's report")
    report.add_argument(
        "--what",
        default="runs",
        choices=("runs", "samples"),
        help="csv only: one row per run, or per time-series sample",
    )

    bisecting = commands.add_parser(
        "bisect", help="find the variant (a git revision, a set of options) that made a stack slower"
    )
    bisecting.add_argument("plan", nargs="?", help="plan TOML file with a [bisect] table")
    bisecting.add_argument("--good", help="the variant known good: a revision, or a variant's name")
    bisecting.add_argument("--bad", help="the variant known slower")
    bisecting.add_argument("--resume", type=int, metavar="BISECT", help="go on with a stopped bisect")
    bisecting.add_argument("--db", type=str, default=DEFAULT_DB, help=DB_HELP)
    bisecting.add_argument("--scratch", type=Path, default=DEFAULT_ROOT, help="scratch root")

    comparing = commands.add_parser(
        "compare", help="experiment B against experiment A, per stack and workload"
    )
    comparing.add_argument("a", type=int, nargs="?", help="experiment id A (the reference)")
    comparing.add_argument("b", type=int, nargs="?", help="experiment id B")
    comparing.add_argument(
        "--fleet", metavar="FLEET", help="instead: every host of this fleet against its reference host"
    )
    comparing.add_argument("--db", type=str, default=DEFAULT_DB, help="results of A (and of B): " + DB_HELP)
    comparing.add_argument("--db-b", type=str, help="results of B, when they are elsewhere")
    comparing.add_argument("--format", default="text", choices=document.load_formats("comparison"))
    comparing.add_argument("-o", "--output", type=Path, help="write to this file")

    history = commands.add_parser("history", help="every experiment in the results file")
    history.add_argument("--db", type=str, default=DEFAULT_DB, help=DB_HELP)
    history.add_argument("--format", default="text", choices=document.load_formats("history"))

    doctoring = commands.add_parser("doctor", help="is this host fit to measure on? checks with fixes")
    doctoring.add_argument("plan", nargs="?", help="plan TOML file: check its tools and disk space too")
    doctoring.add_argument("--scratch", type=Path, default=DEFAULT_ROOT, help="scratch root")
    doctoring.add_argument("--quick", action="store_true", help="skip the idle-write probe (about 11 s)")
    doctoring.add_argument("--format", default="text", choices=("text", "json"))

    commands.add_parser("list", help="layer and workload kinds, and whether this host has them")

    selftest = commands.add_parser("selftest", help="check that measurements find real differences only")
    selftest.add_argument("--scratch", type=Path, default=DEFAULT_ROOT, help="scratch root")
    selftest.add_argument("--db", type=str, help="keep the checks' experiments here (default: discard)")
    selftest.add_argument(
        "--size",
        default="512M",
        help="bytes the known-effect check writes per run; the settle check deletes twice as much",
    )
    selftest.add_argument(
        "--simulations",
        type=int,
        default=validity.CALIBRATION_EXPERIMENTS,
        help="simulated experiments per calibration check (fewer: quicker, a wider Monte-Carlo error)",
    )
    selftest.add_argument(
        "--repro",
        action="store_true",
        help="instead: one small plan twice back to back, then compare (do the answers repeat?)",
    )

    clean = commands.add_parser("clean", help="remove what a crashed run left in the scratch root")
    clean.add_argument("--scratch", type=Path, default=DEFAULT_ROOT)
    clean.add_argument("--db", type=str, default=DEFAULT_DB, help="mark its killed experiments interrupted")

    migrating = commands.add_parser(
        "migrate", help="upgrade a results file of an older layerbench (an SQLite file after a backup)"
    )
    migrating.add_argument("--db", type=str, default=DEFAULT_DB, help=DB_HELP)
    add_browse_parsers(commands, DEFAULT_DB, DB_HELP)
    return parser


# ---- commands ------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    # The busy-process check's window: opened as the process started (layerbench/__main__.py),
    # so the imports filled it; here only when main() was called some other way.
    busy = args.busy_window or BusyWindow()
    if args.reps is not None and args.reps < 1:
        raise UserError("--reps: must be at least 1")
    if args.fleet is not None:
        return cmd_run_fleet(args)
    plan = _plan_to_run(args)
    mounts = MountNamespace.HOST if args.no_namespace else MountNamespace.PRIVATE_IF_POSSIBLE
    with Session(
        args.scratch,
        "layerbench run",
        db=args.db,
        create_store=args.resume is None,
        mounts=mounts,
        allowed_devices=frozenset(args.allow_device),
        force=args.force,
        report=_say,
    ) as session:
        experiment = _run_interruptibly(session, plan, args, busy)
        if experiment is None:
            return 130
        stored = experiment.id
        assert stored is not None, "an experiment that ran was stored"
        if not args.quiet:
            text_report.show(out, contents.document(reports.gather(experiment.store, stored)))
        console.print(f"experiment {stored} stored in {args.db}")
        return 0


def _plan_to_run(args: argparse.Namespace) -> Plan | None:
    """run's options checked; the plan to run (None: the stored one of the experiment to resume)."""
    if args.hosts is not None:
        raise UserError("--hosts: only with --fleet HEAD")
    if args.credentials is not None:
        raise UserError("--credentials: only with --fleet HEAD")
    if args.resume is not None and (args.plan or args.reps or args.quick or args.budget):
        raise UserError("--resume takes the plan and options stored with the experiment; give no plan")
    if isinstance(args.resume, str):
        raise UserError(
            f"--resume {args.resume}: an experiment's number (a fleet's id only with --fleet HEAD)"
        )
    if args.resume is not None:
        if not args.db.exists():
            raise UserError(f"{args.db}: no results database to resume from")
        return None
    plan = load_plan(args.plan, quick=args.quick, reps=args.reps, budget=args.budget)
    if refusal := footprint.host_refusal(plan.stacks, plan.workloads, args.scratch):
        raise UserError(f"{plan.source}: {refusal}")
    return plan


def _say(line: str) -> None:
    """A line the session reports (recovered leftovers, an upgraded store), never as markup."""
    console.print(escape(line))


def _open_for_writing(db: Location, *, create: bool = True) -> Store:
    """The store for run and clean; when an older one was upgraded, the user is told so."""
    store = Store(db, create=create)
    if line := store.upgrade_line():
        _say(line)
    return store


def _run_interruptibly(
    session: Session, plan: Plan | None, args: argparse.Namespace, busy: BusyWindow
) -> Experiment | None:
    """The experiment (new, or the one to resume) to its end; None if a signal stopped it
    (everything torn down)."""
    assert session.store is not None
    if args.resume is not None:
        experiment = Experiment.resume(session.store, session.executor, args.resume)
    else:
        assert plan is not None
        experiment = Experiment(plan, session.store, session.executor)
    # Stored with the experiment; printed once the input is known good (bad input: one line).
    noise: list[str] = []

    def warnings() -> list[str]:
        noise.extend(doctor.warnings_before_run(args.scratch, plan, busy))
        return session.warnings + noise

    try:
        experiment.prepare(warnings)
        for line in noise:
            console.print(f"[yellow]{escape(line)}[/yellow]")
        description = f"layerbench run {experiment.plan.source}, experiment {experiment.id}"
        session.scratch.describe_holder(description)
        _run_with_progress(experiment, quiet=args.quiet)
    except KeyboardInterrupt:
        console.print(
            f"[yellow]interrupted[/yellow]: experiment {experiment.id} keeps "
            "its finished runs; everything built was torn down"
        )
        return None
    except StoreLost as lost:
        if experiment.id is None:
            raise
        # Stores are only written between trials, so the stack is already down here.
        lost.args = (
            f"{lost.args[0]}; experiment {experiment.id} keeps the runs stored before, "
            "everything built was torn down; once the store is back, "
            f"`layerbench run --resume {experiment.id}` with the same --db completes it",
        )
        raise
    return experiment


def _run_with_progress(experiment: Experiment, *, quiet: bool) -> None:
    if quiet:
        experiment.run()
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(experiment.plan.name, total=len(experiment.trials))
        last = ""

        def update(trial: Trial, total: int, result: TrialResult | None) -> None:
            nonlocal last
            reps = experiment.plan.warmup if trial.warmup else experiment.plan.reps
            what = escape(f"{trial.stack} × {trial.workload} rep {trial.rep + 1}/{reps}")
            what += " (warm-up)" if trial.warmup else ""
            if result is None:
                progress.update(task, description=f"{what}{last}")
                return
            ok = result.counters.status == "ok"
            last = f"  last {result.counters.wall_s:.2f}s" if ok else "  last FAILED"
            progress.update(task, advance=1, total=total, description=f"{what}{last}")

        experiment.run(update)


def _experiment_or_fleet(value: str) -> int | str:
    """--resume: an experiment's number, or a fleet's id (12 hex digits, as `run --fleet` prints it)."""
    if value.isdigit() and len(value) != FLEET_ID_LENGTH:
        return int(value)
    if len(value) == FLEET_ID_LENGTH and all(c in "0123456789abcdef" for c in value):
        return value
    raise argparse.ArgumentTypeError(f"{value!r}: an experiment's number or a fleet's id")


def cmd_run_fleet(args: argparse.Namespace) -> int:
    """The plan on every chosen host of the fleet at once, each its own experiment."""
    from layerbench.fleet import coordinator, credentials, hosts

    if args.resume is not None and (args.plan or args.reps or args.quick or args.hosts):
        raise UserError("--resume takes the plan and the host stored with the experiment; give neither")
    plan = (
        None
        if args.resume is not None
        else load_plan(args.plan, quick=args.quick, reps=args.reps, budget=args.budget)
    )
    store = _open_for_writing(args.db)  # a bad URL or missing rights: one line, before the fleet is touched
    hosts.connect(args.fleet, credentials.load(args.credentials))
    chosen = [] if args.resume is not None else hosts.select(args.hosts)
    if args.resume is not None:
        # A head that was killed left its experiments running in the store: this machine's
        # dead ones become interrupted, as `run` does for a local run (another machine's stay).
        for ident in store.mark_running_interrupted():
            console.print(f"experiment {ident} was killed; marked interrupted")
    display = FleetDisplay(quiet=args.quiet)
    try:
        with display:
            if isinstance(args.resume, str):
                outcomes = coordinator.resume_fleet(store, args.resume, display.update)
            elif args.resume is not None:
                outcomes = [coordinator.resume_host(store, args.resume, display.update)]
            else:
                assert plan is not None
                display.expect(chosen)
                outcomes = coordinator.run_fleet(plan, store, chosen, progress=display.update).hosts
    except KeyboardInterrupt:
        # The hosts' agents tear their trials down when this driver goes; the runs stored stay.
        store.interrupt_mine()
        console.print("[yellow]interrupted[/yellow]: each host keeps its finished runs and tears down")
        sys.stderr.flush()
        os._exit(130)
    for outcome in outcomes:
        detail = f": {outcome.detail}" if outcome.detail else ""
        console.print(f"host {outcome.host}: experiment {outcome.experiment_id} {outcome.status}{detail}")
    fleet = store.fleet_of(outcomes[0].experiment_id)
    console.print(f"fleet {fleet} stored in {args.db}")
    return 0 if all(o.status == "done" for o in outcomes) else 1


class FleetDisplay:
    """One progress row per host."""

    def __init__(self, *, quiet: bool) -> None:
        self.progress = (
            None
            if quiet
            else Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            )
        )
        self.rows: dict[str, Any] = {}

    def __enter__(self) -> "FleetDisplay":
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def expect(self, chosen: list[Any]) -> None:
        if self.progress is not None:
            for host in chosen:
                self.rows[host.name] = self.progress.add_task(escape(host.name), total=None)

    def update(self, host: str, trial: Trial, total: int, result: TrialResult | None) -> None:
        if self.progress is None:
            return
        if host not in self.rows:
            self.rows[host] = self.progress.add_task(escape(host), total=total)
        what = escape(f"{host}: {trial.stack} × {trial.workload} rep {trial.rep + 1}")
        self.progress.update(
            self.rows[host], total=total, description=what, advance=0 if result is None else 1
        )


def cmd_host(args: argparse.Namespace) -> int:
    from layerbench.fleet import credentials, hosts

    if args.host_command == "head":
        fleet_credentials = credentials.create(args.credentials)
        found = hosts.start_head(args.bind, args.port, fleet_credentials)
        console.print(
            f"fleet head listening on {args.bind}:{args.port} (dashboard off; {len(found)} sockets, "
            f"every one on {args.bind}); requests need the token in {fleet_credentials.token}"
        )
        console.print(f"copy {fleet_credentials.directory} to each host (mode 0700), then there, as root:")
        print(f"layerbench host join {args.bind}:{args.port} --name NAME --bind HOST_ADDRESS")
        return 0
    if args.host_command == "join":
        found = hosts.join(args.head, args.name, args.scratch, args.bind, credentials.load(args.credentials))
        bound = {listener.address for listener in found}
        console.print(
            f"joined the fleet at {args.head} as host {args.name} (scratch root {args.scratch}; "
            f"{len(found)} sockets, every one on {', '.join(sorted(bound))})"
        )
        return 0
    hosts.connect(args.head, credentials.load(args.credentials))
    table = Table(title=f"hosts of the fleet at {args.head}", title_justify="left")
    for column in ("host", "address", "state", "cpus", "cpu", "kernel", "disk", "scratch root", "free"):
        table.add_column(column, overflow="fold")
    for host, facts in hosts.describe_all():
        state = "busy" if hosts.busy(host) else "idle"
        free = f"{facts.get('scratch_free_bytes', 0) / 2**30:.1f} GiB" if facts else "?"
        table.add_row(
            host.name,
            host.address,
            state,
            str(facts.get("cpus", "?")),
            facts.get("cpu", "?"),
            facts.get("kernel", "?"),
            facts.get("disk", "?"),
            host.scratch,
            free,
        )
    out.print(table)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    plan = load_plan(args.plan, quick=args.quick, reps=args.reps, budget=args.budget)
    if refusal := footprint.host_refusal(plan.stacks, plan.workloads, args.scratch):
        raise UserError(f"{plan.source}: {refusal}")
    from layerbench.experiment import schedule

    trials = schedule(plan, plan.seed or 0)
    print(  # one line, never wrapped: scripts read it
        f"{plan.source}: plan {plan.name!r} is valid: {len(plan.stacks)} stacks x "
        f"{len(plan.workloads)} workloads x ({plan.warmup} warm-up + {plan.reps} measured) = "
        f"{len(trials)} trials; baseline {plan.baseline}"
        + (f'; reps = "auto" adds rounds up to {plan.max_reps} reps' if plan.auto_reps else "")
        + (
            f"; a budget of {plan.budget_s:g} s adds rounds up to {plan.max_reps} reps, {plan.looks} looks"
            if plan.budget_s is not None
            else ""
        )
    )
    for line in expansion.describe(plan.sweeps, plan.increments):
        print(f"  {line}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    store = Store(args.db, read_only=True)
    if args.bisect is not None:
        return _report_bisect(store, args)
    ident = args.experiment if args.experiment is not None else store.latest_experiment_id()
    if ident is None:
        raise UserError(f"{args.db}: holds no experiment yet")
    data = reports.gather(store, ident)
    if args.what == "samples":
        if args.format != "csv":
            raise UserError("--what samples: only with --format csv (json holds the samples of every run)")
        return _emit(csv_export.render_samples(data), args.output)
    if args.format == "text" and args.output is None:
        text_report.show(out, contents.document(data))
        return 0
    return _emit(reports.render(data, args.format), args.output)


def _report_bisect(store: Store, args: argparse.Namespace) -> int:
    if args.experiment is not None or args.what != "runs":
        raise UserError("report --bisect BISECT: give no experiment (and no --what)")
    if args.format not in (formats := document.load_formats("bisect")):
        raise UserError(f"--format {args.format}: a bisect's report is one of {', '.join(formats)}")
    found = bisect_report.gather(store, args.bisect, str(args.db))
    if args.format == "text" and args.output is None:
        text_report.show(out, bisect_report.document(found))
        return 0
    rendered = document.Report("bisect", found, lambda: bisect_report.document(found))
    return _emit(document.render(rendered, args.format), args.output)


def cmd_bisect(args: argparse.Namespace) -> int:
    """A bisect from its plan and ends, or resumed; its report at the end."""
    from layerbench.bisect import run as bisecting
    from layerbench.bisect import spec, variants

    if args.resume is not None:
        if args.plan or args.good or args.bad:
            raise UserError("bisect --resume takes the plan and the ends stored with the bisect; give none")
        if not args.db.exists():
            raise UserError(f"{args.db}: no results database to resume from")
    elif args.plan is None or args.good is None or args.bad is None:
        raise UserError("bisect: give a PLAN, --good and --bad (or --resume BISECT)")
    plan = None if args.plan is None else spec.BisectPlan.load(args.plan)
    found = None if plan is None else variants.resolve(plan, args.good, args.bad)  # bad ends: one line, now
    with Session(
        args.scratch,
        "layerbench bisect",
        db=args.db,
        create_store=args.resume is None,
        report=_say,
    ) as session:
        store = session.store
        assert store is not None
        plan = plan or bisecting.resumable(store, args.resume)
        with bisecting.checkouts(session, plan) as builds:
            if args.resume is not None:
                ident = args.resume
            else:
                assert found is not None
                bisecting.build_good_end(builds, found[0], args.good)
                ident = bisecting.begin(store, plan, args.good, args.bad, found)
            console.print(
                f"bisect {ident}: {len(store.bisect(ident).state.variants)} variants, stored in {args.db}"
            )
            try:
                bisecting.search(session, ident, plan, builds, _say)
            except KeyboardInterrupt:
                console.print(
                    f"[yellow]interrupted[/yellow]: bisect {ident} keeps its finished comparisons; "
                    f"`layerbench bisect --resume {ident}` with the same --db goes on"
                )
                return 130
        text_report.show(out, bisect_report.document(bisect_report.gather(store, ident, str(args.db))))
    return 0


def _emit(text: str, output: Path | None) -> int:
    if output is None:
        sys.stdout.write(text)
        return 0
    # Write beside the target and rename: never a half-written report.
    directory = output.resolve().parent
    if not directory.is_dir():
        raise UserError(f"-o {output}: directory {directory} does not exist")
    with tempfile.NamedTemporaryFile("w", dir=directory, delete=False) as handle:
        handle.write(text)
    # NamedTemporaryFile makes 0600 files; a report is meant to be shared like any file.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(handle.name, 0o666 & ~umask)
    os.replace(handle.name, output)
    console.print(f"wrote {output}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    if args.fleet is not None:
        if args.a is not None or args.b is not None or args.db_b is not None:
            raise UserError("compare --fleet FLEET: give no experiment ids (and no --db-b)")
        return _compare_fleet(args)
    if args.a is None or args.b is None:
        raise UserError("compare: give experiments A and B, or --fleet FLEET")
    side_a = load_side(args.db, args.a)
    side_b = load_side(args.db_b or args.db, args.b)
    return _emit(_render_comparison(compare(side_a, side_b), args.format), args.output)


def _render_comparison(comparison: Any, format_name: str) -> str:
    report = document.Report("comparison", comparison, lambda: comparison_report.document(comparison))
    return document.render(report, format_name)


def _compare_fleet(args: argparse.Namespace) -> int:
    from layerbench.analysis.compare import compare_fleet

    record, comparisons = compare_fleet(args.db, args.fleet)

    def render(comparison: Any) -> str:
        return _render_comparison(comparison, args.format)

    if args.format == "json":
        documents = [json.loads(render(c)) for c in comparisons]
        document = {"fleet": record.id, "reference": record.reference, "comparisons": documents}
        return _emit(json.dumps(document, indent=2) + "\n", args.output)
    parts = [f"fleet {record.id}: every host against {record.reference}\n"]
    for comparison in comparisons:
        parts.append(f"\n== host {comparison.b.experiment.host_name} against {record.reference} ==\n")
        parts.append(render(comparison))
    return _emit("".join(parts), args.output)


def cmd_history(args: argparse.Namespace) -> int:
    store = Store(args.db, read_only=True)
    try:
        experiments = store.history()
    finally:
        store.close()
    records = trends(args.db, experiments)
    report = document.Report("history", records, lambda: history_report.document(records))
    return _emit(document.render(report, args.format), None)


def cmd_doctor(args: argparse.Namespace) -> int:
    plan = load_plan(args.plan) if args.plan else None
    checks = doctor.diagnose(args.scratch, plan, probe=not args.quick)
    if args.format == "json":
        sys.stdout.write(json.dumps({"checks": [c.as_dict() for c in checks]}, indent=2) + "\n")
    else:
        table = Table(title="doctor", title_justify="left")
        for column in ("check", "status", "found", "fix"):
            table.add_column(column, overflow="fold")
        style = {"ok": "green", "warn": "yellow", "fail": "red", "info": "dim"}
        for check in checks:
            table.add_row(check.name, check.status, check.detail, check.fix, style=style[check.status])
        out.print(table)
    return 1 if any(c.status == "fail" for c in checks) else 0


def cmd_list(args: argparse.Namespace) -> int:
    sections: list[tuple[str, Mapping[str, type[Layer[LayerOptions]] | type[Workload[WorkloadOptions]]]]] = [
        ("layer kinds", load_layer_kinds()),
        ("workload kinds", load_workload_kinds()),
    ]
    for title, kinds in sections:
        table = Table(title=title, title_justify="left")
        for column in ("kind", "what it is", "needs", "on this host"):
            table.add_column(column)
        for name, cls in sorted(kinds.items()):
            missing = cls.missing(None)
            needs = ", ".join(getattr(cls, "tools", ())) or "-"
            here = "yes" if not missing else "missing: " + "; ".join(missing)
            table.add_row(name, cls.summary, needs, here)
        out.print(table)
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    require_root("layerbench clean", "to unmount")
    # First: a --db that is not layerbench's is refused before the scratch root is touched.
    # Clean never makes a store: a missing file or an empty database has nothing to mark.
    try:
        store: Store | None = _open_for_writing(args.db, create=False)
    except NoResults:
        store = None
    if not args.scratch.exists():
        out.print(f"nothing to clean: {args.scratch} does not exist")
        return 0
    with Scratch(args.scratch) as scratch:
        scratch.lock("layerbench clean")
        recovery = scratch.clean()
    for line in recovery.removed:
        print(line)  # one line each, never wrapped: scripts read them
    if store is not None:
        for ident in store.mark_running_interrupted():
            out.print(f"experiment {ident} marked interrupted")
    out.print(f"clean: {len(recovery.removed)} leftover(s) removed from {scratch.root}")
    for line in recovery.problems:
        print(f"clean: cannot remove {line}", file=sys.stderr)
    return 1 if recovery.problems else 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """An older store upgraded on purpose, and what was done said."""
    store = Store(args.db, create=False)
    store.close()
    if store.upgraded is None:
        print(f"{args.db}: already at revision {migrate.head()}, this layerbench's; nothing to do")
    else:
        print(store.upgrade_line())
    return 0


def cmd_selftest(args: argparse.Namespace) -> int:
    require_root("layerbench selftest")
    try:
        parse_size(args.size)
    except ValueError as exc:
        raise UserError(f"--size: {exc}") from None
    if args.simulations < 100:
        raise UserError(f"--simulations {args.simulations}: at least 100 simulated experiments per check")
    check_root(args.scratch)
    show = lambda check: out.print(check.line(), markup=False)  # noqa: E731
    if args.repro:
        checks = repeatability.selftest_repro(args.scratch, args.db, report=show)
    else:
        checks = validity.selftest(
            args.scratch, args.db, size=args.size, simulations=args.simulations, report=show
        )
    failed = [c for c in checks if not c.passed]
    out.print(f"selftest: {len(checks) - len(failed)} of {len(checks)} checks passed")
    return 1 if failed else 0


COMMANDS = {
    "run": cmd_run,
    "check": cmd_check,
    "report": cmd_report,
    "list": cmd_list,
    "clean": cmd_clean,
    "compare": cmd_compare,
    "bisect": cmd_bisect,
    "history": cmd_history,
    "doctor": cmd_doctor,
    "selftest": cmd_selftest,
    "host": cmd_host,
    "migrate": cmd_migrate,
    "serve": cmd_serve,
    "trend": cmd_trend,
}


def main(argv: list[str] | None = None, busy_window: BusyWindow | None = None) -> int:
    """The command in argv (sys.argv's by default); busy_window: other processes' CPU since
    the process started, for run's busy-process check."""
    args = _parser().parse_args(argv)
    args.busy_window = busy_window
    try:
        for option in ("db", "db_b"):  # a path or a URL: bad ones get the one-line error below
            if getattr(args, option, None) is not None:
                setattr(args, option, locate(getattr(args, option)))
        return COMMANDS[args.command](args)
    except UserError as exc:
        print(f"layerbench: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        console.print("layerbench: interrupted")
        return 130
    except Exception as exc:  # a bug: one line here, the traceback in a file
        log = _write_traceback(args.command)
        what = f"{type(exc).__name__}: {exc}".splitlines()[0]
        print(f"layerbench: internal error: {what} (traceback in {log})", file=sys.stderr)
        return 3


def _write_traceback(command: str) -> Path:
    """The traceback of an unexpected exception, kept in a file for a bug report."""
    import time
    import traceback

    directory = Path(os.environ.get("LAYERBENCH_LOG_DIR", tempfile.gettempdir()))
    log = directory / f"layerbench-{command}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    with contextlib.suppress(OSError), open(log, "w") as handle:
        handle.write(f"layerbench {__version__}: {' '.join(sys.argv)}\n")
        traceback.print_exc(file=handle)
    return log
