"""The commands over the stored results of many experiments: `serve` (the read-only results
browser) and `trend` (a plan's steps on the command line, for CI)."""

import argparse
import ipaddress
import json
import socket
import sys
from typing import Any

from layerbench.core.errors import UserError
from layerbench.store import Location, Store

LOOPBACK = "127.0.0.1"


def add_parsers(commands: Any, default_db: str, db_help: str) -> None:
    """serve and trend, on cli.py's subcommands."""
    serving = commands.add_parser("serve", help="browse the results in a web browser (read-only)")
    serving.add_argument("--db", type=str, default=default_db, help=db_help)
    serving.add_argument(
        "--bind", default=LOOPBACK, help=f"the address to listen on (default {LOOPBACK}: this machine only)"
    )
    serving.add_argument("--port", type=int, default=8000)
    trending = commands.add_parser(
        "trend", help="a plan's relative costs across its experiments: steps, and open regressions"
    )
    trending.add_argument("plan", help="the plan's name, as its experiments are stored")
    trending.add_argument("--stack", help="only this stack")
    trending.add_argument("--workload", help="only this workload")
    trending.add_argument("--db", type=str, default=default_db, help=db_help)
    trending.add_argument("--format", default="text", choices=("text", "json"))


def exposure(bind: str, port: int, location: Location) -> str | None:
    """The one line said when the browser listens beyond this machine, else None."""
    try:
        loopback = ipaddress.ip_address(bind).is_loopback
    except ValueError:
        loopback = bind == "localhost"
    if loopback:
        return None
    return (
        f"layerbench serve: listening on {bind}:{port}, beyond this machine: anyone who can reach it "
        f"can read every experiment, run, plan and host fact in {location} (read-only, no login)"
    )


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from layerbench.serve.app import create_app

    if not 0 < args.port < 65536:
        raise UserError(f"--port {args.port}: a port from 1 to 65535")
    app = create_app(args.db)  # a missing or foreign store: one line, before listening
    _check_free(args.bind, args.port)
    if line := exposure(args.bind, args.port, args.db):
        print(line, file=sys.stderr)
    host = f"[{args.bind}]" if ":" in args.bind else args.bind
    print(f"layerbench serve: {args.db} at http://{host}:{args.port}/ (Ctrl-C stops)", file=sys.stderr)
    uvicorn.run(app, host=args.bind, port=args.port, log_level="warning", server_header=False)
    return 0


def _check_free(bind: str, port: int) -> None:
    """A port in use or an address not on this machine is one line, not the server's log."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    try:
        with socket.socket(family) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((bind, port))
    except OSError as exc:
        raise UserError(f"--bind {bind} --port {port}: cannot listen there ({exc.strerror})") from None


def cmd_trend(args: argparse.Namespace) -> int:
    """Exit 1 when a regression is open in the series shown, 0 otherwise."""
    from layerbench.analysis import trend

    store = Store(args.db, read_only=True)
    try:
        whole = trend.trend(store, args.plan)
    finally:
        store.close()
    for option, value, present in (
        ("--stack", args.stack, {s.stack for s in whole.series}),
        ("--workload", args.workload, {s.workload for s in whole.series}),
    ):
        if value is not None and value not in present:
            raise UserError(
                f"{option} {value}: not in plan {args.plan!r} (it has {', '.join(sorted(present))})"
            )
    shown = whole.only(args.stack, args.workload)
    regressions = shown.open_regressions()
    if args.format == "json":
        document = {
            "schema_version": 1,
            "plan": args.plan,
            "proposals": whole.proposals,
            "series": [
                {
                    "host": s.host,
                    "stack": s.stack,
                    "workload": s.workload,
                    "points": [
                        {"experiment": p.experiment, "started": p.started, "ratio": p.ratio} for p in s.points
                    ],
                }
                for s in shown.series
            ],
            "steps": [s.as_dict() | {"open": s in regressions} for s in shown.real_steps()],
            "open_regressions": len(regressions),
        }
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        sys.stdout.write(text(shown, whole.proposals, regressions))
    return 1 if regressions else 0


def text(shown: Any, proposals: int, regressions: list[Any]) -> str:
    from layerbench.reports.base import fmt_p, fmt_ratio

    lines = [
        f"plan {shown.plan}: {len(shown.series)} series; {proposals} change points proposed (PELT), "
        "tested from the top down at alpha over every place a series could be cut; steps:"
    ]
    steps = shown.real_steps()
    for step in steps:
        series = step.series
        state = "  OPEN REGRESSION" if step in regressions else ""
        changed = "; ".join(f"{k}: {a} -> {b}" for k, a, b in step.changed[:5]) or "no host fact"
        if len(step.changed) > 5:
            changed += f" and {len(step.changed) - 5} more (--format json has them)"
        lines.append(
            f"  {series.stack} x {series.workload} on {series.host}: from experiment {step.after.experiment} "
            f"(after {step.before.experiment}) {fmt_ratio(step.row)} {step.row.decision} "
            f"(p adj. {fmt_p(step.row)}, {step.row.method}){state}; changed: {changed}"
        )
    if not steps:
        lines.append("  none")
    lines.append(f"{len(regressions)} open regression(s)")
    return "\n".join(lines) + "\n"
