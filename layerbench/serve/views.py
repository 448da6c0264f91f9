"""The browser's views of one store: the experiments, an experiment, its runs, one run.

A view is a template with its context and the tables it shows; the CSV and JSON exports of a
view are those tables, so an export holds exactly the rows on the page. An experiment's
numbers come from reports.gather, the data every report format is built from.
"""

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import date
from typing import Any, TypeVar, cast
from urllib.parse import quote, urlencode

from starlette.datastructures import QueryParams

from layerbench import stats
from layerbench.analysis.compare import flatten
from layerbench.core import metrics
from layerbench.core.errors import UserError
from layerbench.core.runs import RunRecord
from layerbench.reports import base as reports
from layerbench.reports import contents
from layerbench.reports.document import Document, Figure
from layerbench.serve import checks, figures
from layerbench.store import SAMPLE_COLUMNS, ExperimentSummary, Store

T = TypeVar("T")
SORTS = ("id", "name", "host", "kernel", "status", "started", "runs")
ORDERS = ("desc", "asc")
EXPERIMENT_COLUMNS = ("id", "name", "fleet", "host", "kernel", "started", "finished", "status", "runs")
CACHED_MAX = 64  # computed views kept (reports, comparisons, trends); then all forgotten at once
RUN_COLUMNS = ("id", "trial", "rep", "warmup", "status", "wall_s", "user_s", "sys_s", "cpu_pct", "disturbed")


@dataclass
class Table:
    """Rows as shown (cells as they read on the page), and where a cell links to."""

    name: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    links: list[dict[int, str]] = field(default_factory=list)  # per row: column -> URL

    def add(self, row: list[Any], links: dict[int, str] | None = None) -> None:
        self.rows.append(row)
        self.links.append(links or {})

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


@dataclass
class View:
    template: str
    title: str
    tables: list[Table]
    context: dict[str, Any] = field(default_factory=dict)


class Browser:
    """The open read-only store and what was computed from it, kept while it holds."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.lock = threading.Lock()
        self._cache: dict[Hashable, Any] = {}
        self._underway: dict[Hashable, threading.Lock] = {}

    def cached(self, key: Hashable, compute: Callable[[], T]) -> T:
        """One computation per key: the key names what it was computed from (an experiment's
        run count and status, a plan's experiments), so a running experiment is recomputed.
        A request for a key being computed waits for that computation instead of repeating it
        (the server's warm-up and the first visitors ask for the same trends)."""
        with self.lock:
            if key in self._cache:
                return cast(T, self._cache[key])
            underway = self._underway.setdefault(key, threading.Lock())
        with underway:
            with self.lock:
                if key in self._cache:
                    return cast(T, self._cache[key])
            try:
                value = compute()
            finally:  # a failed computation leaves no lock behind; the next caller tries again
                with self.lock:
                    self._underway.pop(key, None)
            with self.lock:
                if len(self._cache) >= CACHED_MAX:
                    self._cache.clear()
                self._cache[key] = value
        return value

    def history(self) -> list[ExperimentSummary]:
        """Every experiment's record (shared: read, never change it), read again only once
        the store has moved on: 2,000 experiments take about 140 ms to read and decode."""
        return self.cached(("history", self.store.state()), self.store.history)

    def experiment_record(self, experiment_id: int) -> ExperimentSummary:
        found = self.store.history(experiment_id=experiment_id)
        if not found:
            raise checks.NotFound(f"no experiment {experiment_id}")
        return found[0]

    def report(self, experiment_id: int) -> reports.ReportData:
        return self.cached(
            self._key("report", experiment_id), lambda: reports.gather(self.store, experiment_id)
        )

    def document(self, experiment_id: int) -> Document:
        """What the html report shows of the experiment, built once per state of it."""
        key = self._key("document", experiment_id)
        return self.cached(key, lambda: contents.document(self.report(experiment_id)))

    def figure(self, experiment_id: int, name: str) -> str:
        """One figure of the experiment's document, as SVG, drawn once per state of it."""
        found = {
            block.name: block
            for section in self.document(experiment_id).sections
            for block in section.blocks
            if isinstance(block, Figure)
        }
        if name not in found:
            raise checks.NotFound(f"experiment {experiment_id} has no such figure")
        return self.cached(self._key(("figure", name), experiment_id), lambda: figures.drawn(found[name]))

    def _key(self, what: Hashable, experiment_id: int) -> Hashable:
        """What a view of an experiment was computed from: its runs and status (a running
        experiment's views are computed again as its runs are stored)."""
        record = self.experiment_record(experiment_id)
        return (what, experiment_id, record.runs, record.status)

    def state(self, experiment_id: int) -> dict[str, Any]:
        """What a page following a running experiment asks for, every few seconds."""
        record = self.experiment_record(experiment_id)
        return {"id": experiment_id, "status": record.status, "runs": record.runs}


def _in_range(started: str, since: date | None, until: date | None) -> bool:
    day = date.fromisoformat(started[:10])
    return (since is None or day >= since) and (until is None or day <= until)


def experiments(browser: Browser, query: QueryParams) -> View:
    """Every experiment, filtered by plan, host, status and start date, sorted."""
    found = checks.filters(
        query, ("plan", "host", "kernel", "fleet", "status", "since", "until", "sort", "order")
    )
    records = browser.history()
    plan = checks.one_of(found, "plan", {str(r.name) for r in records})
    host = checks.one_of(found, "host", {str(r.host) for r in records})
    kernel = checks.one_of(found, "kernel", {str(r.kernel) for r in records})
    fleet = checks.one_of(found, "fleet", {str(r.fleet) for r in records if r.fleet})
    status = checks.one_of(found, "status", {str(r.status) for r in records})
    since, until = checks.day(found, "since"), checks.day(found, "until")
    sort = checks.one_of(found, "sort", SORTS) or "id"
    order = checks.one_of(found, "order", ORDERS) or "desc"
    shown = [
        r
        for r in records
        if plan in (None, r.name)
        and host in (None, str(r.host))
        and kernel in (None, str(r.kernel))
        and fleet in (None, r.fleet)
        and status in (None, r.status)
        and _in_range(str(r.started), since, until)
    ]

    def by_sort(record: ExperimentSummary) -> tuple[bool, Any]:
        value = getattr(record, sort)
        return (value is None, value if value is not None else 0)

    shown.sort(key=by_sort, reverse=order == "desc")
    table = Table("experiments", list(EXPERIMENT_COLUMNS))
    for record in shown:
        links = {0: f"/experiments/{record.id}", 1: "/trends?" + urlencode({"plan": record.name})}
        if record.fleet:
            links[2] = f"/fleets/{record.fleet}"
        table.add([getattr(record, c) for c in EXPERIMENT_COLUMNS], links)
    choices = {
        "plan": sorted({str(r.name) for r in records}),
        "host": sorted({str(r.host) for r in records}),
        "kernel": sorted({str(r.kernel) for r in records}),
        "fleet": sorted({str(r.fleet) for r in records if r.fleet}),
        "status": sorted({str(r.status) for r in records}),
        "sort": SORTS,
        "order": ORDERS,
    }
    return View("experiments.html", "experiments", [table], {"found": found, "choices": choices})


def _ratio_table(data: reports.ReportData, experiment_id: int) -> Table:
    """The reports' table of each workload, its ratio cell a link to the runs behind it."""
    tables = {w: contents.comparison_table(data, w, "wall_s") for w in data.workloads}
    header = next((t.header for t in tables.values() if t is not None), [])
    table = Table("ratios", ["workload", *header])
    for workload, shown in tables.items():
        for row in shown.texts() if shown is not None else []:
            runs = f"/experiments/{experiment_id}/runs?" + urlencode({"stack": row[0], "workload": workload})
            table.add([workload, *row], {1: runs, 3: runs})
    return table


def experiment(browser: Browser, experiment_id: int, query: QueryParams) -> View:
    """What the html report shows (its document), the ratios linked to their runs; a page
    that follows the experiment while it runs."""
    checks.filters(query, ())
    data = browser.report(experiment_id)
    record = data.experiment
    earlier = [
        r.id
        for r in browser.history()
        if r.name == record.name and r.id < experiment_id and r.status == "done"
    ]
    context = {
        "experiment": browser.experiment_record(experiment_id).as_dict() | vars(record),
        "document": browser.document(experiment_id),
        "figure_src": lambda name: f"/experiments/{experiment_id}/figures/{quote(name, safe='')}.svg",
        "cost_title": contents.COST_TITLE,
        "live": f"/experiments/{experiment_id}/state.json" if record.status == "running" else None,
        "previous": earlier[-1] if earlier else None,
        "plan_link": "/trends?" + urlencode({"plan": record.name}),
    }
    title = f"experiment {experiment_id}: {record.name}"
    return View("experiment.html", title, [_ratio_table(data, experiment_id)], context)


def runs(browser: Browser, experiment_id: int, query: QueryParams) -> View:
    """The runs of an experiment, of one stack and workload when asked: where a ratio comes from."""
    found = checks.filters(query, ("stack", "workload"))
    data = browser.report(experiment_id)
    stack = checks.one_of(found, "stack", data.stacks)
    workload = checks.one_of(found, "workload", data.workloads)
    table = Table("runs", ["stack", "workload", *RUN_COLUMNS, "csh time line"])
    for run in data.runs:
        if stack not in (None, run.stack) or workload not in (None, run.workload):
            continue
        cells = [run.stack, run.workload] + [
            stats.is_disturbed(run) if c == "disturbed" else _column(run, c) for c in RUN_COLUMNS
        ]
        line = (reports.csh_time_line(run) if run.ok else run.error) or "-"
        table.add([*cells, line], {2: f"/runs/{run.id}"})
    context = {"experiment": data.experiment, "stack": stack, "workload": workload}
    return View("runs.html", f"experiment {experiment_id}: runs", [table], context)


def _column(run: RunRecord, name: str) -> Any:
    """A column of the runs table by its name: an identity field or a counter."""
    return run.value(name) if name in metrics.BY_NAME else getattr(run, name)


def run(browser: Browser, run_id: int, query: QueryParams) -> View:
    """One run: every column of its row, its devices and facts (dotted keys), its samples."""
    checks.filters(query, ())
    try:
        record = browser.store.run(run_id)
    except UserError:
        record = None
    if record is None:
        raise checks.NotFound(f"no run {run_id}")
    counters = Table("counters", ["counter", "value"])
    for key, value in ({"id": record.id, "experiment_id": record.experiment_id} | record.row()).items():
        counters.add([key, value], {1: f"/experiments/{value}"} if key == "experiment_id" else None)
    for prefix, tree in (("devices", record.devices), ("facts", record.facts)):
        for key, value in flatten(tree, f"{prefix}.").items():
            counters.add([key, value])
    rows = [list(s.as_dict().values()) for s in browser.store.run_samples(run_id)]
    series = Table("samples", list(SAMPLE_COLUMNS), rows, [{} for _ in rows])
    line = reports.csh_time_line(record) if record.ok else None
    context = {"run": record, "csh": line}
    return View("run.html", f"run {run_id}", [counters, series], context)


def heat(row: Any) -> str:
    """A cell's class, from its verdict (so the colour never says more than the interval):
    slower or faster, "much" beyond x2 or x0.5; equivalent is "same"; undecided is "open"."""
    if row is None or row.ratio is None:
        return "none"
    if row.decision == "slower":
        return "much-slower" if row.ratio >= 2 else "slower"
    if row.decision == "faster":
        return "much-faster" if row.ratio <= 0.5 else "faster"
    return "same" if row.decision == "equivalent" else "open"


def fleet(browser: Browser, fleet_id: str, query: QueryParams) -> View:
    """One fleet: stack x workload (rows) by host (columns), each cell a host's ratio against
    the baseline with its interval, coloured by its verdict, linked to that host's runs."""
    checks.filters(query, ())
    try:
        record = browser.store.fleet(fleet_id)
    except UserError:
        raise checks.NotFound(f"no fleet {fleet_id!r}") from None
    members = {h: record.experiments[h].id for h in record.hosts if h in record.experiments}
    datas = {h: browser.report(ident) for h, ident in members.items()}
    table = Table("matrix", ["stack", "workload", *members])
    classes: list[list[str]] = []
    first = next(iter(datas.values()), None)
    cells_of = (
        []
        if first is None
        else [
            (stack, workload)
            for workload in first.workloads
            for stack in first.stacks
            if stack != first.experiment.baseline
        ]
    )
    for stack, workload in cells_of:
        which = urlencode({"stack": stack, "workload": workload})
        rows = [datas[host].summary(stack, workload, "wall_s") for host in members]
        table.add(
            [
                stack,
                workload,
                *(reports.fmt_ratio(r) if r is not None and r.ratio is not None else "-" for r in rows),
            ],
            {
                column: f"/experiments/{ident}/runs?{which}"
                for column, ident in enumerate(members.values(), start=2)
            },
        )
        classes.append(["", "", *(heat(r) for r in rows)])
    context = {"fleet": record, "hosts": list(members), "classes": classes}
    return View("fleet.html", f"fleet {fleet_id}: {record.name}", [table], context)
