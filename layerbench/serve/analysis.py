"""The browser's views across experiments: compare two, a plan's trends, its regressions.

Compare is `layerbench compare`'s own comparison (compare.compare); trends and regressions
are `layerbench trend`'s (trend.trend), computed once per state of the plan's experiments.
"""

import importlib
import logging
import threading
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import QueryParams

from layerbench.analysis import trend as trends
from layerbench.analysis.compare import Side, compare
from layerbench.reports.base import fmt_level, fmt_p, fmt_ratio
from layerbench.serve import checks
from layerbench.serve.views import Browser, Table, View


def _side(browser: Browser, experiment_id: int) -> Side:
    browser.experiment_record(experiment_id)  # a missing one is a 404, not an error
    store = browser.store
    return Side(
        store.location,
        store.experiment(experiment_id),
        store.runs(experiment_id),
        store.sentinels(experiment_id),
    )


def comparison(browser: Browser, query: QueryParams) -> View:
    """B against A, relative costs first, as `layerbench compare A B` puts them."""
    found = checks.filters(query, ("a", "b"))
    records = browser.history()
    context: dict[str, Any] = {"found": found, "choices": [(r.id, r.name) for r in records]}
    relative = Table("relative", ["stack", "workload", "B / A relative cost", "verdict", "p adj."])
    absolute = Table("absolute", ["stack", "workload", "B / A elapsed time", "verdict", "p adj."])
    differences = Table("host differences", ["fact", "A", "B"])
    tables = [relative, absolute, differences]
    if "a" not in found or "b" not in found:
        return View("compare.html", "compare", tables, context)
    a, b = checks.query_ident(found["a"], "a"), checks.query_ident(found["b"], "b")
    key = ("compare", a, b, *(browser.experiment_record(i).runs for i in (a, b)))
    result = browser.cached(key, lambda: compare(_side(browser, a), _side(browser, b)))
    for target, rows in ((relative, result.relative), (absolute, result.rows)):
        for row in rows:
            runs = f"/experiments/{b}/runs?" + urlencode({"stack": row.stack, "workload": row.workload})
            target.add([row.stack, row.workload, fmt_ratio(row), row.verdict, fmt_p(row)], {2: runs})
    for fact, value_a, value_b in result.host_differences:
        differences.add([fact, value_a, value_b])
    context |= {
        "a": result.a.experiment,
        "b": result.b.experiment,
        "drift": result.drift.line(),
        "agreement": result.agreement(),
        "plans_differ": result.plans_differ,
    }
    return View("compare.html", f"compare {a} and {b}", tables, context)


def plan_trend(browser: Browser, plan: str) -> trends.Trend:
    state = tuple((r.id, r.status, r.runs) for r in browser.store.history(name=plan))
    return browser.cached(("trend", plan, state), lambda: trends.trend(browser.store, plan))


WARMED_PLANS = 16  # the plans whose trends the server computes as it starts, latest first


def warm_up(browser: Browser, closing: threading.Event) -> None:
    """While the server starts: import the change-point library (about a second) and compute
    the trends of up to WARMED_PLANS plans, the newest first, so that neither waits for the
    first visitor to ask (a plan of 200 experiments: about 0.9 s). A visitor asking meanwhile
    waits for the same computation (Browser.cached), never a second one."""
    try:
        browser.history()  # the experiments page's records, what a visitor opens first
        importlib.import_module("ruptures")
        newest_first = list(reversed(trends.plans(browser.store)))[:WARMED_PLANS]
        for plan in newest_first:
            if closing.is_set():
                return
            plan_trend(browser, plan)
    except Exception as exc:  # a page that asks for it says what went wrong
        if not closing.is_set():
            logging.getLogger(__name__).warning("trends not computed ahead: %s", exc)


def _plan(browser: Browser, found: dict[str, str]) -> str | None:
    return checks.one_of(found, "plan", trends.plans(browser.store))


def trend_view(browser: Browser, query: QueryParams) -> View:
    """One plan's stack x workload ratios across its experiments, per host, with the steps."""
    found = checks.filters(query, ("plan", "stack", "workload", "host"))
    plan = _plan(browser, found)
    points = Table("points", ["host", "stack", "workload", "experiment", "started", "ratio", "step"])
    context: dict[str, Any] = {"found": found, "plans": trends.plans(browser.store), "series": []}
    if plan is None:
        return View("trends.html", "trends", [points, _steps_table([], [])], context)
    whole = plan_trend(browser, plan)
    stack = checks.one_of(found, "stack", {s.stack for s in whole.series})
    workload = checks.one_of(found, "workload", {s.workload for s in whole.series})
    host = checks.one_of(found, "host", {s.host for s in whole.series})
    shown = whole.only(stack, workload)
    series = [s for s in shown.series if host in (None, s.host)]
    steps = [s for s in shown.real_steps() if host in (None, s.series.host)]
    starts = {(s.series.key, s.after.experiment) for s in steps}
    for one in series:
        for point in one.points:
            step = "step" if (one.key, point.experiment) in starts else ""
            points.add(
                [
                    one.host,
                    one.stack,
                    one.workload,
                    point.experiment,
                    point.started,
                    round(point.ratio, 4),
                    step,
                ],
                {3: f"/experiments/{point.experiment}"},
            )
    context |= {
        "plan": plan,
        "series": [(s, "/trends/plot.svg?" + urlencode(_series_query(plan, s))) for s in series],
        "choices": {
            "stack": sorted({s.stack for s in whole.series}),
            "workload": sorted({s.workload for s in whole.series}),
            "host": sorted({s.host for s in whole.series}),
        },
        "proposals": whole.proposals,
    }
    table = _steps_table(steps, whole.open_regressions())
    return View("trends.html", f"trends of {plan}", [points, table], context)


def _series_query(plan: str, series: trends.Series) -> dict[str, str]:
    return {"plan": plan, "host": series.host, "stack": series.stack, "workload": series.workload}


def _steps_table(steps: list[trends.Step], opened: list[trends.Step]) -> Table:
    table = Table(
        "steps",
        [
            "plan",
            "host",
            "stack",
            "workload",
            "before",
            "after",
            "step [CI, level]",
            "level",
            "p adj.",
            "verdict",
            "open",
            "what changed",
        ],
    )
    for step in steps:
        changed = "; ".join(f"{k}: {a} -> {b}" for k, a, b in step.changed) or "-"
        compare_link = "/compare?" + urlencode({"a": step.before.experiment, "b": step.after.experiment})
        table.add(
            [
                step.series.plan,
                step.series.host,
                step.series.stack,
                step.series.workload,
                step.before.experiment,
                step.after.experiment,
                fmt_ratio(step.row),
                fmt_level(step.row.ratio_ci_level),
                fmt_p(step.row),
                step.row.decision,
                "open regression" if any(step is o for o in opened) else "",
                changed,
            ],
            {
                4: f"/experiments/{step.before.experiment}",
                5: f"/experiments/{step.after.experiment}",
                6: compare_link,
            },
        )
    return table


def steps_of(browser: Browser, query: QueryParams) -> tuple[list[trends.Step], list[trends.Step]]:
    """Every real step of every plan (or of the one the query names), and the open ones."""
    found = checks.filters(query, ("plan",))
    plan = _plan(browser, found)
    every: list[trends.Step] = []
    opened: list[trends.Step] = []
    for name in [plan] if plan else trends.plans(browser.store):
        whole = plan_trend(browser, name)
        every += whole.real_steps()
        opened += whole.open_regressions()
    return every, opened


def regressions(browser: Browser, query: QueryParams) -> View:
    """Every real step of every plan (or of one), the open regressions marked."""
    found = checks.filters(query, ("plan",))
    every, opened = steps_of(browser, query)
    table = _steps_table(every, opened)
    context = {"found": found, "plans": trends.plans(browser.store), "open": len(opened)}
    return View("regressions.html", "regressions", [table], context)


def series_of(browser: Browser, query: QueryParams) -> tuple[trends.Series, list[trends.Step]]:
    """The one series a trend plot draws, and its real steps."""
    found = checks.filters(query, ("plan", "stack", "workload", "host"))
    plan = _plan(browser, found)
    if plan is None or len(found) != 4:
        raise checks.BadRequest("a trend plot takes plan, host, stack and workload")
    whole = plan_trend(browser, plan)
    key = (found["host"], found["stack"], found["workload"])
    series = [s for s in whole.series if s.key == key]
    if not series:
        raise checks.BadRequest("no such series in this plan")
    return series[0], [s for s in whole.real_steps() if s.series.key == key]
