"""`layerbench serve` in a real browser: headless Chromium (Debian's chromium and
chromium-driver) driven by Selenium, against a server started on a throw-away SQLite store
written by the fake executor, on 127.0.0.1 and a free port. `layerbench trend` on the same
stores."""

import contextlib
import csv
import hashlib
import html
import http.client
import io
import json
import math
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import REPO, TEST_ROOT, cli

from layerbench.cross_experiments import exposure
from layerbench.executors.fake import FakeExecutor
from layerbench.experiment import Experiment
from layerbench.plan import parse_plan
from layerbench.plan.schedule import Trial
from layerbench.reports import gather, render
from layerbench.store import Store, locate

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

PLAN = """
name = "{name}"
reps = 4
warmup = 0
baseline = "base"
sentinel = false
settle = 0
[stacks.base]
layers = []
[stacks.slow]
layers = []
[stacks.same]
layers = []
[workloads.w]
kind = "command"
run = "true"
"""
EXPERIMENTS = 10
STEP_FROM = 6  # the seventh experiment of the plan (id 7) is the first after the step
HOSTILE = ("1 OR 1=1", "'; DROP TABLE runs; --", "x" * 10_000)


class KernelExecutor(FakeExecutor):
    """The fake executor on a host whose kernel is given: the step comes with a kernel change."""

    def __init__(self, script: Any, kernel: str) -> None:
        super().__init__(script)
        self.kernel = kernel

    def host(self) -> dict[str, Any]:
        return super().host() | {"kernel": self.kernel}


def _build(where: "Path | str", *, step: bool, experiments: int = EXPERIMENTS) -> "Path | str":
    """experiments experiments of plan "trendy" (stack slow x1.10 of base; with step, x1.40
    from experiment STEP_FROM + 1 on, on a new kernel), then one of plan "other"."""
    store = Store(where)
    rng = np.random.default_rng(7)
    for index in range(experiments + 1):
        stepped = step and index >= STEP_FROM

        def script(trial: Trial, stepped: bool = stepped) -> dict[str, float]:
            effect = {"base": 1.0, "same": 1.0, "slow": 1.4 if stepped else 1.1}[trial.stack]
            return {"wall_s": effect * math.exp(rng.normal(0, 0.02)), "user_s": 0.1, "sys_s": 0.2}

        name = "trendy" if index < experiments else "other"
        executor = KernelExecutor(script, "6.2" if stepped else "6.1")
        experiment = Experiment(parse_plan(PLAN.format(name=name), "plan.toml"), store, executor, seed=index)
        experiment.prepare([])
        experiment.run()
    store.close()
    return where


FLEET_ID = "abc123def456"
FLEET_EFFECTS = {"a": 1.1, "b": 2.5, "c": 1.0}  # stack slow's cost on each host


def _build_fleet(where: "Path | str") -> "Path | str":
    """One fleet of plan "fleety" on hosts a, b, c: slow costs x1.1, x2.5 and nothing."""
    store = Store(where)
    hosts = list(FLEET_EFFECTS)
    store.create_fleet(FLEET_ID, name="fleety", plan_source="plan.toml", reference="a", hosts=hosts)
    rng = np.random.default_rng(3)
    for host, effect in FLEET_EFFECTS.items():

        def script(trial: Trial, effect: float = effect) -> dict[str, float]:
            cost = {"base": 1.0, "same": 1.0, "slow": effect}[trial.stack]
            return {"wall_s": cost * math.exp(rng.normal(0, 0.01)), "user_s": 0.1, "sys_s": 0.2}

        plan = parse_plan(PLAN.format(name="fleety"), "plan.toml")
        experiment = Experiment(plan, store, FakeExecutor(script), seed=1, fleet=FLEET_ID, host_name=host)
        experiment.prepare([])
        experiment.run()
    store.close()
    return where


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def stores() -> Iterator[dict[str, Path]]:
    root = TEST_ROOT / "serve"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    stepped, flat = _build(root / "stepped.db", step=True), _build(root / "flat.db", step=False)
    assert isinstance(stepped, Path) and isinstance(flat, Path)
    fleet = _build_fleet(root / "fleet.db")
    assert isinstance(fleet, Path)
    yield {"stepped": stepped, "flat": flat, "fleet": fleet}
    shutil.rmtree(root, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _serving(where: str) -> Iterator[tuple[int, subprocess.Popen[str], list[str]]]:
    """`layerbench serve --db where` on a free port of 127.0.0.1; stopped at the end, whatever happened."""
    port = _free_port()
    child = subprocess.Popen(
        [sys.executable, "-m", "layerbench", "serve", "--db", where, "--port", str(port)],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    said: list[str] = []  # what it printed, once stopped
    try:
        _wait_listening(port, child)
        yield port, child, said
    finally:
        child.terminate()
        try:
            said += child.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            said += child.communicate()


@pytest.fixture(scope="module")
def server(stores: dict[str, Path]) -> Iterator[dict[str, Any]]:
    """The browser on the stepped store, and the store's digest before it started."""
    before = _digest(stores["stepped"])
    with _serving(str(stores["stepped"])) as (port, child, _):
        yield {"base": f"http://127.0.0.1:{port}", "port": port, "digest": before, "child": child}


def _wait_listening(port: int, child: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise AssertionError(f"serve ended: {child.communicate()}")
        try:
            if _get(port, "/experiments")[0] == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("serve never answered")


def _get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium with a throw-away profile; quit at the end, whatever happened."""
    if not shutil.which("chromium") or not shutil.which("chromedriver"):
        pytest.skip("Debian's chromium and chromium-driver are not installed (deps/apt.txt)")
    TEST_ROOT.mkdir(parents=True, exist_ok=True)  # the first test of a session may need it
    profile = tempfile.mkdtemp(prefix="chromium-serve-", dir=TEST_ROOT)
    options = Options()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    try:
        driver.get("about:blank")
        _drain(driver)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _drain(driver: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The console messages and the URLs requested since the last call."""
    console = driver.get_log("browser")
    requested = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requested.append(message["params"]["request"]["url"])
    return console, requested


def _open(driver: Any, server: dict[str, Any], path: str) -> None:
    driver.get(server["base"] + path)
    _wait_images(driver)


def _wait_images(driver: Any) -> None:
    deadline = time.monotonic() + 30
    script = "return [...document.images].every(i => i.complete)"
    while not driver.execute_script(script) and time.monotonic() < deadline:
        time.sleep(0.1)


def _table(driver: Any, name: str) -> list[list[str]]:
    rows = driver.find_elements(By.CSS_SELECTOR, f"#table-{name} tbody tr")
    return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")] for row in rows]


VIEWS = [
    "/experiments",
    "/experiments?plan=trendy&sort=started&order=asc",
    "/experiments/7",
    "/experiments/7/runs?stack=slow&workload=w",
    "/runs/5",
    "/compare?a=6&b=7",
    "/trends",
    "/trends?plan=trendy",
    "/trends?plan=trendy&stack=slow",
    "/trends?plan=other",  # a plan of one experiment: one point a series
    "/regressions",
]


def test_each_view_renders_with_no_console_error_and_nothing_from_another_origin(
    browser: Any, server: dict[str, Any]
) -> None:
    for path in VIEWS:
        _open(browser, server, path)
        assert browser.find_element(By.TAG_NAME, "h1").text, path
        broken = browser.execute_script("return [...document.images].filter(i => !i.naturalWidth).length")
        assert broken == 0, f"{path}: a plot did not draw"
        console, requested = _drain(browser)
        assert [m for m in console if m["level"] in ("SEVERE", "WARNING")] == [], path
        elsewhere = [u for u in requested if u.split(":")[0] in ("http", "https", "ws", "wss")]
        assert elsewhere and all(u.startswith(server["base"] + "/") for u in elsewhere), (path, elsewhere)


def test_clicking_a_ratio_opens_the_runs_behind_it(browser: Any, server: dict[str, Any]) -> None:
    _open(browser, server, "/experiments/7")
    row = next(
        r for r in browser.find_elements(By.CSS_SELECTOR, "#table-ratios tbody tr") if "slow" in r.text
    )
    ratio = row.find_elements(By.TAG_NAME, "td")[3]
    assert ratio.text.startswith("x1.")
    ratio.find_element(By.TAG_NAME, "a").click()
    _settle(browser, lambda: "/runs?" in browser.current_url)
    url = urllib.parse.urlsplit(browser.current_url)
    assert url.path == "/experiments/7/runs"
    assert urllib.parse.parse_qs(url.query) == {"stack": ["slow"], "workload": ["w"]}
    runs = _table(browser, "runs")
    assert len(runs) == 4 and {r[0] for r in runs} == {"slow"}
    _drain(browser)


def test_an_experiment_page_shows_what_its_html_report_shows(
    browser: Any, server: dict[str, Any], stores: dict[str, Path]
) -> None:
    """The same sections in the same order, every figure drawn: one document, two renderings."""
    store = Store(stores["stepped"], read_only=True)
    try:
        report = render(gather(store, 7), "html")
    finally:
        store.close()
    expected = [html.unescape(title) for title in re.findall(r'<h[23] id="[^"]*">([^<]*)</h[23]>', report)]
    _open(browser, server, "/experiments/7")
    shown = [heading.text for heading in browser.find_elements(By.CSS_SELECTOR, "main h2, main h3")]
    assert shown == expected and {"Warnings", "The plan", "Workload w"} <= set(shown)
    drawn = browser.find_elements(By.CSS_SELECTOR, "main .figure img")
    assert len(drawn) == report.count('<div class="figure"') >= 2
    assert all(browser.execute_script("return arguments[0].naturalWidth", image) > 0 for image in drawn)
    assert not browser.find_elements(By.ID, "live"), "a finished experiment is not followed"
    console, _ = _drain(browser)
    assert [m for m in console if m["level"] in ("SEVERE", "WARNING")] == []


def _stored(browser: Any) -> tuple[str, int]:
    """The status and the run count an experiment's page shows."""
    found = re.match(r"Status (\w+).*?, (\d+) runs? stored", browser.find_element(By.ID, "status").text)
    assert found, browser.find_element(By.ID, "status").text
    return found[1], int(found[2])


def test_a_running_experiment_is_followed_as_its_runs_are_stored(browser: Any) -> None:
    """The page of a running experiment shows itself again as each run is stored, and stops
    following once the experiment is done; the test never reloads it."""
    root = TEST_ROOT / "serve-live"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    gate = threading.Semaphore(0)  # one release, one trial

    def script(trial: Trial) -> dict[str, float]:
        assert gate.acquire(timeout=120), "the test never let this trial run"
        return {"wall_s": {"base": 1.0, "slow": 1.3, "same": 1.0}[trial.stack], "user_s": 0.1, "sys_s": 0.2}

    store = Store(root / "live.db")
    experiment = Experiment(
        parse_plan(PLAN.format(name="live"), "plan.toml"), store, FakeExecutor(script), seed=1
    )
    experiment.prepare([])
    worker = threading.Thread(target=experiment.run)
    worker.start()
    try:
        with _serving(str(root / "live.db")) as (port, _, _):
            browser.get(f"http://127.0.0.1:{port}/experiments/{experiment.id}")
            assert _stored(browser) == ("running", 0)
            assert "running: this page follows it" in browser.find_element(By.ID, "live").text
            gate.release()
            _settle(browser, lambda: _stored(browser) == ("running", 1))
            for _ in range(11):  # 3 stacks x 4 repetitions in all
                gate.release()
            _settle(browser, lambda: _stored(browser) == ("done", 12))
            assert not browser.find_elements(By.ID, "live")
            assert len(_table(browser, "ratios")) == 3
            console, _ = _drain(browser)
            assert [m for m in console if m["level"] in ("SEVERE", "WARNING")] == []
    finally:
        for _ in range(12):
            gate.release()
        worker.join(60)
        store.close()
        shutil.rmtree(root, ignore_errors=True)
    assert not worker.is_alive()


def test_a_filter_lives_in_the_url_and_the_back_button_restores_it(
    browser: Any, server: dict[str, Any]
) -> None:
    _open(browser, server, "/experiments")
    assert len(_table(browser, "experiments")) == EXPERIMENTS + 1
    Select(browser.find_element(By.ID, "filter-plan")).select_by_value("other")
    browser.find_element(By.ID, "apply").click()
    _settle(browser, lambda: "plan=other" in browser.current_url and _plan_shown(browser) == "other")
    assert [r[1] for r in _table(browser, "experiments")] == ["other"]
    browser.back()
    # The page that comes back shows what its URL says, the filter included.
    _settle(
        browser, lambda: urllib.parse.urlsplit(browser.current_url).query == "" and _plan_shown(browser) == ""
    )
    assert len(_table(browser, "experiments")) == EXPERIMENTS + 1
    _drain(browser)


def _plan_shown(browser: Any) -> str:
    return str(
        Select(browser.find_element(By.ID, "filter-plan")).first_selected_option.get_attribute("value")
    )


def _settle(browser: Any, done: Any) -> None:
    """Until the navigation has happened and done() holds (a page is not there at once)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            if browser.execute_script("return document.readyState") == "complete" and done():
                return
        except WebDriverException:
            pass  # the page went away between two looks
        time.sleep(0.05)
    raise AssertionError(f"the page never settled: {browser.current_url}")


def test_an_export_holds_exactly_the_rows_shown(browser: Any, server: dict[str, Any]) -> None:
    _open(browser, server, "/experiments?plan=trendy&sort=started&order=asc&since=2000-01-01")
    shown = _table(browser, "experiments")
    assert len(shown) == EXPERIMENTS
    csv_link = browser.find_element(By.CSS_SELECTOR, "a.export-csv").get_attribute("href")
    status, headers, body = _get(
        server["port"], urllib.parse.urlsplit(csv_link).path + "?" + urllib.parse.urlsplit(csv_link).query
    )
    assert status == 200 and headers["content-type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(body)))
    assert [r[0] for r in rows[1:]] == [r[0] for r in shown]
    browser.find_element(By.CSS_SELECTOR, "a.export-json").click()
    _settle(browser, lambda: ".json?" in browser.current_url)
    document = json.loads(browser.find_element(By.TAG_NAME, "body").text)
    exported = document["tables"]["experiments"]
    assert [str(r["id"]) for r in exported] == [r[0] for r in shown]
    assert [r["name"] for r in exported] == ["trendy"] * EXPERIMENTS
    _drain(browser)


def _hostile_paths() -> list[tuple[str, int]]:
    quoted = [urllib.parse.quote(h, safe="") for h in HOSTILE]
    paths = []
    for value in quoted:
        paths += [
            (f"/experiments/{value}", 404),
            (f"/experiments/{value}/runs", 404),
            (f"/experiments/{value}.json", 404),
            (f"/experiments/{value}/state.json", 404),
            (f"/experiments/7/figures/{value}.svg", 404),
            (f"/experiments/{value}/figures/ratio-plot.svg", 404),
            (f"/runs/{value}", 404),
            (f"/experiments?plan={value}", 400),
            (f"/experiments.csv?host={value}", 400),
            (f"/experiments?status={value}", 400),
            (f"/experiments?sort={value}", 400),
            (f"/experiments?since={value}", 400),
            (f"/experiments?{value}=1", 400),
            (f"/experiments/7/runs?stack={value}", 400),
            (f"/compare?a={value}&b=7", 400),
            (f"/trends?plan={value}", 400),
            (f"/trends?plan=trendy&workload={value}", 400),
            (f"/trends/plot.svg?plan=trendy&host=fake&stack={value}&workload=w", 400),
            (f"/regressions.json?plan={value}", 400),
        ]
    return [
        *paths,
        ("/experiments/99999999999999999999", 404),
        ("/compare?a=999&b=7", 404),
        ("/runs/99999", 404),
        ("/experiments/7/figures/ratio-plot", 404),
    ]


def test_hostile_ids_and_filters_are_404_or_400_and_change_nothing(server: dict[str, Any]) -> None:
    for path, expected in _hostile_paths():
        status, headers, body = _get(server["port"], path)
        assert status == expected, path[:80]
        assert "default-src 'self'" in headers["content-security-policy"]
        assert "Traceback" not in body and "sqlalchemy" not in body.lower()
        assert len(body) < 4000, f"{path[:80]}: the page echoes the request"
    for path in (
        "/experiments.csv",
        "/experiments/7/figures/ratio-plot.svg",
        "/static/style.css",
        "/nowhere",
    ):
        assert "default-src 'self'" in _get(server["port"], path)[1]["content-security-policy"], path
    assert _get(server["port"], "/experiments", "POST")[0] == 405
    assert _get(server["port"], "/experiments/7", "DELETE")[0] == 405
    assert server["child"].poll() is None


def test_the_planted_step_is_found_once_in_the_browser(browser: Any, server: dict[str, Any]) -> None:
    _open(browser, server, "/regressions")
    steps = _table(browser, "steps")
    assert len(steps) == 1
    plan, _host, stack, workload, before, after = steps[0][:6]
    assert (plan, stack, workload, before, after) == ("trendy", "slow", "w", "6", "7")
    assert steps[0][9] == "slower" and steps[0][10] == "open regression"
    assert "kernel: 6.1 -> 6.2" in steps[0][11]
    _open(browser, server, "/trends?plan=trendy")
    marked = [r for r in _table(browser, "points") if r[-1] == "step"]
    assert [(r[1], r[3]) for r in marked] == [("slow", "7")]
    assert [(r[2], r[5], r[10]) for r in _table(browser, "steps")] == [("slow", "7", "open regression")]
    _drain(browser)


def test_a_trends_points_say_which_experiment_they_are_and_open_it(
    browser: Any, server: dict[str, Any]
) -> None:
    """Interactive with no style and no script of another origin: the plot is put inline by
    the page's own script, each point titled and linked to its experiment."""
    _open(browser, server, "/trends?plan=trendy&stack=slow")
    _settle(browser, lambda: browser.find_elements(By.CSS_SELECTOR, ".figure svg.inline-plot"))
    links = browser.find_elements(By.CSS_SELECTOR, ".figure svg.inline-plot a")
    titles = [link.find_element(By.TAG_NAME, "title").get_attribute("textContent") for link in links]
    assert [title.split()[1] for title in titles] == [str(i) for i in range(1, EXPERIMENTS + 1)], titles
    assert all(re.search(r"\): x1\.\d{3}$", title) for title in titles), titles
    assert browser.execute_script("return document.querySelectorAll('[style]').length") == 0
    console, _ = _drain(browser)
    assert [m for m in console if m["level"] in ("SEVERE", "WARNING")] == []  # the policy refused nothing
    links[6].click()
    _settle(browser, lambda: urllib.parse.urlsplit(browser.current_url).path == "/experiments/7")
    _drain(browser)


def test_the_regressions_feed_has_the_planted_step_as_its_one_entry(server: dict[str, Any]) -> None:
    from xml.etree import ElementTree

    status, headers, body = _get(server["port"], "/regressions.atom")
    assert status == 200 and headers["content-type"].startswith("application/atom+xml")
    atom = "{http://www.w3.org/2005/Atom}"
    feed = ElementTree.fromstring(body)
    assert feed.tag == f"{atom}feed" and feed.findtext(f"{atom}updated", "").endswith("Z")
    entries = feed.findall(f"{atom}entry")
    assert len(entries) == 1
    title = entries[0].findtext(f"{atom}title", "")
    assert title.startswith("trendy: slow x w on ") and "(open regression)" in title
    link = entries[0].find(f"{atom}link")
    assert link is not None and link.get("href") == f"{server['base']}/compare?a=6&b=7"
    assert "kernel: 6.1 -> 6.2" in entries[0].findtext(f"{atom}summary", "")
    assert _get(server["port"], "/regressions.atom?plan=%27%3B%20DROP%20TABLE%20runs")[0] in (400, 404)


def test_a_fleet_is_a_heat_map_of_host_by_stack_and_workload(browser: Any, stores: dict[str, Path]) -> None:
    """Each host a column, each stack x workload a row; a cell's colour is its ratio's band
    (slow on host a, x1.1: slower; on b, x2.5: much slower; on c, no cost: the same or
    undecided: the colour follows the verdict), and it opens
    that host's runs; a fleet id that is not one is a 404 page."""
    with _serving(str(stores["fleet"])) as (port, _, _):
        site = {"base": f"http://127.0.0.1:{port}"}
        _open(browser, site, f"/fleets/{FLEET_ID}")
        header = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#table-matrix thead th")]
        assert header == ["stack", "workload", "a", "b", "c"]
        rows = browser.find_elements(By.CSS_SELECTOR, "#table-matrix tbody tr")
        cells = {r.find_elements(By.TAG_NAME, "td")[0].text: r.find_elements(By.TAG_NAME, "td") for r in rows}
        assert sorted(cells) == ["same", "slow"]
        shade = {host: cells["slow"][2 + i].get_attribute("class") for i, host in enumerate("abc")}
        assert shade["b"] == "heat-much-slower" and shade["a"] == "heat-slower", shade
        assert shade["c"] in ("heat-same", "heat-open"), shade
        assert cells["slow"][3].text.startswith("x2.")
        console, _ = _drain(browser)
        assert [m for m in console if m["level"] in ("SEVERE", "WARNING")] == []
        cells["slow"][3].find_element(By.TAG_NAME, "a").click()
        _settle(browser, lambda: urllib.parse.urlsplit(browser.current_url).path.endswith("/runs"))
        assert "stack=slow" in browser.current_url
        _drain(browser)
        for bad in ("zzz", "1 OR 1=1", "x" * 10_000, "ABC"):
            assert _get(port, "/fleets/" + urllib.parse.quote(bad))[0] == 404, bad
        assert _get(port, f"/fleets/{FLEET_ID}.json")[0] == 200


def test_trend_on_the_command_line_exits_1_on_the_step_and_0_without(stores: dict[str, Path]) -> None:
    stepped = cli("trend", "trendy", "--db", str(stores["stepped"]), "--format", "json", timeout=120)
    assert stepped.returncode == 1, stepped.stderr
    document = json.loads(stepped.stdout)
    assert [(s["stack"], s["before"], s["after"], s["open"]) for s in document["steps"]] == [
        ("slow", 6, 7, True)
    ]
    flat = cli("trend", "trendy", "--db", str(stores["flat"]), timeout=120)
    assert flat.returncode == 0, flat.stderr
    assert "  none" in flat.stdout and "0 open regression(s)" in flat.stdout


def test_the_store_is_byte_for_byte_unchanged_after_every_request(
    stores: dict[str, Path], server: dict[str, Any]
) -> None:
    assert _digest(stores["stepped"]) == server["digest"]


def test_serve_refuses_a_port_in_use_in_one_line(stores: dict[str, Path]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("serve", "--db", str(stores["flat"]), "--port", str(port), timeout=60)
    assert done.returncode == 2 and "cannot listen there" in done.stderr and "Traceback" not in done.stderr


def test_only_a_bind_beyond_loopback_says_what_it_exposes() -> None:
    location = locate("postgresql://bench:s3cret@db.example/results")
    assert exposure("127.0.0.1", 8000, location) is None
    assert exposure("::1", 8000, location) is None
    line = exposure("0.0.0.0", 8000, location)
    assert line is not None and "s3cret" not in line and "db.example" in line


def test_a_postgresql_store_is_browsed_and_its_password_never_shown(postgres_cluster: Any) -> None:
    url = postgres_cluster.create_database("serve_browse")
    with_password = url.replace("postgresql://postgres@", "postgresql://postgres:s3cret-word@")
    _build(with_password, step=False, experiments=2)
    with _serving(with_password) as (port, _, said):
        for path, expected in (("/experiments", 200), ("/experiments/1", 200), ("/experiments/9", 404)):
            status, _, body = _get(port, path)
            assert status == expected, path
            assert "s3cret-word" not in body and "serve_browse" in body
        assert _get(port, "/trends?plan=trendy")[0] == 200
    _build_fleet(with_password)  # a fleet's store on PostgreSQL: its matrix
    with _serving(with_password) as (port, _, said):
        status, _, body = _get(port, f"/fleets/{FLEET_ID}")
        assert status == 200 and 'class="heat-much-slower"' in body and "s3cret-word" not in body
    assert "s3cret-word" not in "".join(said) and "serve_browse" in "".join(said)


def test_a_view_being_computed_is_waited_for_not_computed_again(tmp_path: Path) -> None:
    """The server's warm-up and the first visitors ask for the same trends at once: one
    computation, every caller its value."""
    import threading

    from layerbench.serve.views import Browser

    db = tmp_path / "r.db"
    Store(db).close()
    store = Store(db, read_only=True)
    browser = Browser(store)
    computed: list[int] = []
    started = threading.Event()

    def compute() -> int:
        computed.append(1)
        started.set()
        time.sleep(0.3)  # long enough for the other callers to arrive while it runs
        return 42

    answers: list[int] = []

    def ask() -> None:
        answers.append(browser.cached("trend", compute))

    first = threading.Thread(target=ask)
    first.start()
    assert started.wait(10)
    others = [threading.Thread(target=ask) for _ in range(3)]
    for thread in others:
        thread.start()
    for thread in [first, *others]:
        thread.join(10)
    store.close()
    assert answers == [42] * 4 and len(computed) == 1
