"""The ASGI app: routes, exports, error pages and the headers every response carries.

Only GET (and HEAD) routes exist: nothing a request asks can write. The store is opened
read-only once, when the app is made. Pages, images and exports come from this origin only,
and every response says so in its Content-Security-Policy.
"""

import contextlib
import csv
import io
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from jinja2 import ChoiceLoader, Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from layerbench.reports import html
from layerbench.serve import analysis, checks, feed, figures, views
from layerbench.serve.views import Browser, View
from layerbench.store import Store, StoreLost

POLICY = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"
HEADERS = {
    "content-security-policy": POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}
log = logging.getLogger("layerbench.serve")


class SecurityHeaders:
    """Adds the policy headers to every response, error pages and static files included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                given = [(k, v) for k, v in message.get("headers", []) if k.decode().lower() not in HEADERS]
                message["headers"] = given + [(k.encode(), v.encode()) for k, v in HEADERS.items()]
            await send(message)

        await self.app(scope, receive, with_headers)


def _templates(location: str) -> Jinja2Templates:
    # The report's document.html beside the browser's own templates: an experiment's page
    # shows what its html report shows.
    loader = ChoiceLoader([PackageLoader("layerbench.serve", "templates"), html.TEMPLATES])
    environment = html.install(Environment(loader=loader, autoescape=select_autoescape(default=True)))
    environment.globals["location"] = location
    return Jinja2Templates(env=environment)


def _export(view: View, fmt: str, request: Request) -> Response:
    """The view's tables as they are shown: JSON all of them, CSV the first (the view's own)."""
    if fmt == "json":
        document = {
            "view": request.url.path.rsplit(".", 1)[0]
            + (f"?{request.url.query}" if request.url.query else ""),
            "tables": {t.name: t.records() for t in view.tables},
        }
        return Response(json.dumps(document, indent=2, default=str) + "\n", media_type="application/json")
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(view.tables[0].columns)
    writer.writerows(view.tables[0].rows)
    name = view.title.replace(" ", "-").replace(":", "")
    disposition = f'attachment; filename="{"".join(c for c in name if c.isalnum() or c in "-_")}.csv"'
    return Response(buffer.getvalue(), media_type="text/csv", headers={"content-disposition": disposition})


def _page(templates: Jinja2Templates, view: View, request: Request) -> Response:
    query = f"?{request.url.query}" if request.url.query else ""
    exports = {f: f"{request.url.path}.{f}{query}" for f in ("csv", "json")}
    context = {"view": view, "tables": view.tables, "exports": exports, **view.context}
    # Not kept for the back button: a page shows what its URL says, never controls left
    # as they were before a filter was applied, nor an experiment as it was while it ran.
    headers = {"cache-control": "no-store"}
    return templates.TemplateResponse(request, view.template, context, headers=headers)


Handler = Callable[[Request], View]


def _endpoint(templates: Jinja2Templates, handler: Handler) -> Callable[[Request], Response]:
    def endpoint(request: Request) -> Response:
        ident = request.path_params.get("ident")
        fmt = checks.fmt(request.path_params.get("fmt", "html"))
        if ident is not None and fmt == "html":
            ident, fmt = checks.split_format(ident)
            request.path_params["ident"] = ident
        view = handler(request)
        return _page(templates, view, request) if fmt == "html" else _export(view, fmt, request)

    return endpoint


def _base(request: Request) -> str:
    """The server's own URL, as the client reached it (the feed's links are absolute)."""
    return f"{request.url.scheme}://{request.url.netloc}"


def _svg(text: str) -> Response:
    return Response(text, media_type="image/svg+xml")


def _figure_name(request: Request) -> str:
    """A figure's name from its URL (NAME.svg)."""
    name = str(request.path_params["name"])
    if not name.endswith(".svg"):
        raise checks.NotFound("a figure is NAME.svg")
    return name.removesuffix(".svg")


def _error(templates: Jinja2Templates, request: Request, status: int, message: str) -> Response:
    return templates.TemplateResponse(
        request, "error.html", {"status": status, "message": message}, status_code=status
    )


def _error_handlers(templates: Jinja2Templates) -> dict[Any, Callable[..., Response]]:
    def not_found(request: Request, exc: Exception) -> Response:
        return _error(
            templates, request, 404, str(exc) if isinstance(exc, checks.NotFound) else "no such page"
        )

    def bad_request(request: Request, exc: Exception) -> Response:
        return _error(templates, request, 400, str(exc))

    def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _error(templates, request, exc.status_code, str(exc.detail))

    def store_lost(request: Request, exc: Exception) -> Response:
        return _error(templates, request, 503, str(exc))

    def internal(request: Request, exc: Exception) -> Response:
        # The traceback stays in the server's log: a page never shows one.
        log.error("internal error on %s", request.url.path, exc_info=exc)
        return _error(templates, request, 500, "internal error (the server's log has the details)")

    return {
        checks.NotFound: not_found,
        404: not_found,
        checks.BadRequest: bad_request,
        HTTPException: http_error,
        StoreLost: store_lost,
        Exception: internal,
    }


def _routes(browser: Browser, templates: Jinja2Templates) -> list[Route | Mount]:
    def ident(request: Request, what: str = "experiment") -> int:
        return checks.ident(request.path_params["ident"], what)

    pages: dict[str, Handler] = {
        "/experiments": lambda r: views.experiments(browser, r.query_params),
        "/experiments/{ident}": lambda r: views.experiment(browser, ident(r), r.query_params),
        "/experiments/{ident}/runs": lambda r: views.runs(browser, ident(r), r.query_params),
        "/runs/{ident}": lambda r: views.run(browser, ident(r, "run"), r.query_params),
        "/compare": lambda r: analysis.comparison(browser, r.query_params),
        "/trends": lambda r: analysis.trend_view(browser, r.query_params),
        "/regressions": lambda r: analysis.regressions(browser, r.query_params),
        "/fleets/{ident}": lambda r: views.fleet(
            browser, checks.fleet_ident(r.path_params["ident"]), r.query_params
        ),
    }
    routes: list[Route | Mount] = [
        Route("/", lambda r: RedirectResponse("/experiments")),
        Route("/favicon.ico", lambda r: RedirectResponse("/static/favicon.svg", status_code=301)),
        Route(
            "/experiments/{ident}/figures/{name}", lambda r: _svg(browser.figure(ident(r), _figure_name(r)))
        ),
        Route("/experiments/{ident}/state.json", lambda r: JSONResponse(browser.state(ident(r)))),
        Route(
            "/regressions.atom",
            lambda r: Response(
                feed.atom(*analysis.steps_of(browser, r.query_params), _base(r), str(browser.store.location)),
                media_type="application/atom+xml",
            ),
        ),
        Route(
            "/trends/plot.svg", lambda r: _svg(figures.series(*analysis.series_of(browser, r.query_params)))
        ),
        Mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static"),
    ]
    for path, handler in pages.items():
        endpoint = _endpoint(templates, handler)
        routes.append(Route(path, endpoint))
        if not path.endswith("}"):  # /runs/{ident} takes its export's suffix in the id itself
            routes.append(Route(path + ".{fmt}", endpoint))
    return routes


def create_app(db: Any) -> ASGIApp:
    """The browser over the store at db (a path, URL or Location), opened read-only. The
    headers wrap the whole app, so that even the page of an internal error carries them."""
    store = Store(db, read_only=True)
    templates = _templates(str(store.location))

    browser = Browser(store)
    closing = threading.Event()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        warming = threading.Thread(target=analysis.warm_up, args=(browser, closing), daemon=True)
        warming.start()
        yield
        closing.set()
        warming.join(timeout=30)
        store.close()

    app = Starlette(
        routes=_routes(browser, templates),
        exception_handlers=_error_handlers(templates),
        lifespan=lifespan,
    )
    return SecurityHeaders(app)
