"""A fleet on this machine: a Ray cluster of 3 nodes started by the test, each node a host
with its own scratch root under the test root, real trials of a tiny plan on each, every run
in a PostgreSQL cluster the test creates (tests/postgres.py) and drops.

Killing a node mid-experiment interrupts that host's experiment (host lost) within 30 s, the
others finish, none of its trials runs elsewhere, nothing is left mounted; `run --resume`
on the host, once it is back, runs only what was missing."""

import contextlib
import itertools
import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import TEST_ROOT, cli, fleet_agents, leftovers, skip_unless_root, start_cli

pytestmark = pytest.mark.e2e

ray = pytest.importorskip("ray", reason="Ray is a dependency of layerbench (pyproject.toml)")

from layerbench.fleet import credentials, local  # noqa: E402
from layerbench.store import Store  # noqa: E402

NAMES = ("a", "b", "c")
PLAN = """
name = "fleet-e2e"
baseline = "dir"
reps = {reps}
warmup = 0
order = "interleaved"
sentinel = false
rerun_disturbed = 0  # three hosts on two cores disturb each other; each trial runs once

[stacks.dir]
layers = []

[stacks.tmpfs]
layers = [{{ kind = "tmpfs", size = "64M" }}]

[workloads.write]
kind = "command"
run = "sh -c 'dd if=/dev/zero of=out bs=1M count=4 conv=fsync status=none && sleep {sleep}'"
"""


def _cluster(root: Path, fleet_credentials: credentials.Credentials) -> Any:
    """A head (no trials of its own) and one node per host, each host registered with its
    scratch root under root; shut down, every node, however the test ends."""
    return local.loopback_cluster(fleet_credentials, [[name] for name in NAMES], root, stay_connected=False)


@contextlib.contextmanager
def _fleet(postgres_cluster: Any) -> Iterator[dict[str, Any]]:
    """The cluster's nodes on loopback, with the fleet's token, and kept to 127.0.0.1 by the
    fleet's bind filter (layerbench.fleet.local): this process is in its cgroup while the
    cluster lasts, so every node it starts (and every command the test runs) is too."""
    # Short: Ray's Unix sockets lie below it (ROOT/ray/session_DATE_PID/sockets/NAME), at
    # most 107 bytes, with room for 7-digit pids (a host whose pid_max is 4194304).
    root = TEST_ROOT / "f"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        with local.loopback_credentials(root) as fleet_credentials, _cluster(root, fleet_credentials) as up:
            try:
                yield {
                    "cluster": up.cluster,
                    "nodes": up.nodes,
                    "root": root,
                    "db": _database(postgres_cluster),
                    "credentials": ("--credentials", str(fleet_credentials.directory)),
                    "fleet_credentials": fleet_credentials,
                }
            finally:
                up.cluster.shutdown()
                for name in NAMES:
                    cleaned = cli("clean", "--scratch", str(root / name), "--db", str(root / "none.db"))
                    assert cleaned.returncode == 0, cleaned.stderr
        assert not (root / "ray").exists()  # Ray's sessions went with the cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _database(postgres_cluster: Any) -> str:
    return str(postgres_cluster.create_database(f"fleet{time.monotonic_ns()}"))


@pytest.fixture
def fleet(needs_root: None, postgres_cluster: Any) -> Iterator[dict[str, Any]]:
    """A cluster of the test's own: the tests that kill or freeze its nodes."""
    with _fleet(postgres_cluster) as up:
        yield up


@pytest.fixture(scope="class")
def whole_fleet(postgres_cluster: Any) -> Iterator[dict[str, Any]]:
    """One cluster for the tests of a class, which leave its nodes as they found them."""
    skip_unless_root()
    with _fleet(postgres_cluster) as up:
        yield up


def _plan(tmp_path: Path, reps: int, sleep: float) -> Path:
    plan = tmp_path / "fleet.toml"
    plan.write_text(PLAN.format(reps=reps, sleep=sleep))
    return plan


def _nothing_left(root: Path) -> None:
    """No agent of this fleet (its scratch roots are under root: another run's agents on
    this machine are not ours to wait for) and nothing it made is left."""
    deadline = time.monotonic() + 15
    while (fleet_agents(root) or leftovers(root)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not fleet_agents(root) and not leftovers(root)


def _by_host(store: Store) -> dict[str, dict[str, Any]]:
    return {e.host: e for e in store.history()}


class TestOnOneCluster:
    """Tests that leave the cluster's nodes as they found them share one (its start and stop
    took some 12 s a test); the bad input first, while no experiment has run on it."""

    @pytest.fixture
    def fleet(self, whole_fleet: dict[str, Any], postgres_cluster: Any) -> dict[str, Any]:
        """The class's cluster, with a results database of the test's own."""
        return {**whole_fleet, "db": _database(postgres_cluster)}

    def test_bad_fleet_input_gets_one_line_and_starts_nothing(self, fleet: dict, tmp_path: Path) -> None:
        address, plan = fleet["cluster"].address, str(_plan(tmp_path, 1, 0))
        cases = {
            ("--fleet", "127.0.0.1:9", "--db", fleet["db"]): "unreachable",
            ("--fleet", "auto", "--db", fleet["db"]): "give the head explicitly",
            ("--fleet", address, "--hosts", "a,zz", "--db", fleet["db"]): "no joined host 'zz'",
            ("--fleet", address, "--hosts", ",", "--db", fleet["db"]): "--hosts: empty",
            ("--fleet", address, "--db", "postgresql://u:s3cret@/none?host=/nonexistent"): "results database",
        }
        for options, expected in cases.items():
            done = cli("run", plan, *options, "--quiet", *fleet["credentials"], timeout=120)
            assert done.returncode == 2 and done.stderr.count("\n") == 1 and expected in done.stderr, (
                done.stderr
            )
            assert "s3cret" not in done.stderr
        joins = {
            ("auto",): "give the head explicitly",
            (address, "--name", "no/slash"): "--name 'no/slash'",
            (address, "--name", "a"): "a host of that name has joined already",
        }
        for options, expected in joins.items():
            done = cli(
                "host",
                "join",
                *options,
                "--scratch",
                str(tmp_path / "joined"),
                *fleet["credentials"],
                timeout=120,
            )
            assert done.returncode == 2 and done.stderr.count("\n") == 1 and expected in done.stderr, (
                done.stderr
            )
        assert Store(fleet["db"]).history() == []
        assert not any(
            (fleet["root"] / name).exists() and any((fleet["root"] / name).iterdir()) for name in NAMES
        )

    def test_a_plan_runs_on_every_host_one_trial_at_a_time_into_postgresql(
        self, fleet: dict, tmp_path: Path
    ) -> None:
        address = fleet["cluster"].address
        # With its display: a progress row per host, then a line per host.
        plan = str(_plan(tmp_path, 2, 0))
        done = cli(
            "run",
            plan,
            "--fleet",
            address,
            "--db",
            fleet["db"],
            *fleet["credentials"],
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
        assert all(f"host {name}: experiment" in done.stderr for name in NAMES), done.stderr
        store = Store(fleet["db"])
        experiments = _by_host(store)
        assert set(experiments) == set(NAMES) and {e.status for e in experiments.values()} == {"done"}
        assert len({e.fleet for e in experiments.values()}) == 1
        seeds = {store.experiment(e.id).seed for e in experiments.values()}
        assert len(seeds) == 1  # the same plan and seed on every host
        # Ray's sessions, logs and sockets under the fleet's root, none in Ray's default /tmp/ray.
        nodes = [fleet["cluster"].head_node, *fleet["nodes"].values()]
        assert all(Path(n.get_session_dir_path()).parent == fleet["root"] / "ray" for n in nodes)
        for name, record in experiments.items():
            runs = store.runs(record.id)
            assert len(runs) == 4 and all(r.ok for r in runs), [r.error for r in runs]
            assert {r.facts["fleet_host"] for r in runs} == {name}  # measured where scheduled
            spans = sorted((r.facts["host_started"], r.facts["host_finished"]) for r in runs)
            assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
            assert store.experiment(record.id).host.facts()["fleet_host"] == name
        _nothing_left(fleet["root"])
        # The reports and compare read PostgreSQL as they read a file, every format.
        first, second = experiments["a"].id, experiments["b"].id
        for form in ("text", "markdown", "mail", "json", "csv", "html"):
            shown = cli("report", str(second), "--db", fleet["db"], "--format", form)
            assert shown.returncode == 0 and shown.stdout, (form, shown.stderr)
        for form in ("text", "markdown", "json", "html"):
            compared = cli("compare", str(first), str(second), "--db", fleet["db"], "--format", form)
            assert compared.returncode == 0 and compared.stdout, (form, compared.stderr)
        fleet_id = experiments["a"].fleet
        by_fleet = cli("compare", "--fleet", fleet_id, "--db", fleet["db"], "--format", "json")
        assert by_fleet.returncode == 0, by_fleet.stderr
        assert [c["b"]["host_name"] for c in json.loads(by_fleet.stdout)["comparisons"]] == ["b", "c"]
        history = cli("history", "--db", fleet["db"])
        assert history.returncode == 0 and all(name in history.stdout for name in NAMES)
        listed = cli("host", "list", address, *fleet["credentials"])
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.count("idle") == 3 and "busy" not in listed.stdout, listed.stdout


def _cut_off(cluster: Any, node: Any) -> None:
    """The host stops answering (its raylet frozen, as behind a broken link); then it is
    taken down for good, as a host found dead would be."""
    raylet = node.all_processes["raylet"][0].process
    os.kill(raylet.pid, signal.SIGSTOP)


@pytest.mark.parametrize("how", ["killed", "cut off"])
def test_a_lost_host_is_interrupted_within_30_s_and_resumes_only_what_is_missing(
    fleet: dict, tmp_path: Path, how: str
) -> None:
    address = fleet["cluster"].address
    # Host b's experiment must outlast its loss being noticed (5-10 s): a cut-off host's agent
    # goes on running and storing trials until its node is declared dead, and with 0.5 s
    # runs it once finished first (stored "done").
    plan = str(_plan(tmp_path, 6, 1))
    running = start_cli(
        "run", plan, "--fleet", address, "--db", fleet["db"], "--quiet", *fleet["credentials"]
    )
    store = Store(fleet["db"])
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        lost = _by_host(store).get("b")
        if lost is not None and lost.runs >= 2:
            break
        time.sleep(0.2)
    else:
        running.kill()
        pytest.fail(f"host b stored no runs: {running.communicate()}")
    killed = time.monotonic()
    if how == "killed":
        fleet["cluster"].remove_node(fleet["nodes"]["b"])
    else:
        _cut_off(fleet["cluster"], fleet["nodes"]["b"])
    while _by_host(store)["b"].status == "running" and time.monotonic() - killed < 60:
        time.sleep(0.2)
    noticed = time.monotonic() - killed
    print(f"host b: interrupted (host lost) {noticed:.1f} s after its node was {how}")
    record = store.experiment(_by_host(store)["b"].id)
    assert (record.status, record.status_reason) == ("interrupted", "host lost")
    assert noticed <= 30, noticed
    _, errors = running.communicate(timeout=600)
    if how == "cut off":  # it comes back, learns it was declared dead, and takes its agent down
        raylet = fleet["nodes"]["b"].all_processes["raylet"][0].process
        os.kill(raylet.pid, signal.SIGCONT)
        fleet["cluster"].remove_node(fleet["nodes"]["b"])
    assert running.returncode == 1, errors  # one host did not finish
    experiments = _by_host(store)
    assert experiments["a"].status == experiments["c"].status == "done"
    kept = store.runs(experiments["b"].id)
    assert 2 <= len(kept) < 12 and {r.facts["fleet_host"] for r in kept} == {"b"}
    for name in ("a", "c"):  # nothing of b's ran on another host
        assert {r.facts["fleet_host"] for r in store.runs(experiments[name].id)} == {name}
    _nothing_left(fleet["root"])
    # Host b is back (a new node with its resource): --resume runs only its missing trials.
    fleet["cluster"].add_node(num_cpus=1, resources={"lb-host:b": 1}, node_ip_address="127.0.0.1")
    fleet["cluster"].wait_for_nodes()
    resumed = cli(
        "run",
        "--resume",
        str(experiments["b"].id),
        "--fleet",
        address,
        "--db",
        fleet["db"],
        "--quiet",
        *fleet["credentials"],
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr
    runs = store.runs(experiments["b"].id)
    assert sorted(r.trial for r in runs) == list(range(12))
    assert store.experiment(experiments["b"].id).status == "done"
    _nothing_left(fleet["root"])


def test_a_lost_head_resumes_every_hosts_experiment_from_its_stored_runs(fleet: dict, tmp_path: Path) -> None:
    """The head dies mid-run (its Ray head and the `run --fleet` process, killed at once);
    the hosts, their head gone, stop and tear down; a new head, the hosts joined to it
    again, and `run --resume FLEET --fleet NEW` finishes every host's experiment: no stored
    run is run again or lost."""
    plan = str(_plan(tmp_path, 6, 0.5))
    running = start_cli(
        "run",
        plan,
        "--fleet",
        fleet["cluster"].address,
        "--db",
        fleet["db"],
        "--quiet",
        *fleet["credentials"],
    )
    store = Store(fleet["db"])
    deadline = time.monotonic() + 300
    while not (len(stored := _by_host(store)) == 3 and all(e.runs >= 2 for e in stored.values())):
        if time.monotonic() > deadline or running.poll() is not None:
            running.kill()
            pytest.fail(f"the hosts stored no runs: {running.communicate()}")
        time.sleep(0.2)
    fleet["cluster"].remove_node(fleet["cluster"].head_node, allow_graceful=False)
    running.kill()
    running.communicate()
    # The hosts lose their head: their Ray nodes stop (a real host's raylet exits once the
    # head has been gone a while), and each agent, its actor gone, tears its trial down.
    for node in fleet["nodes"].values():
        fleet["cluster"].remove_node(node, allow_graceful=False)
    _nothing_left(fleet["root"])
    before = {name: store.runs(e.id) for name, e in _by_host(store).items()}
    assert {e.status for e in _by_host(store).values()} == {"running"}  # nobody said otherwise
    assert all(2 <= len(runs) < 12 for runs in before.values()), {n: len(r) for n, r in before.items()}
    fleet_id = next(iter(_by_host(store).values())).fleet

    with _cluster(fleet["root"], fleet["fleet_credentials"]) as new_head:
        resumed = cli(
            "run", "--resume", fleet_id, "--fleet", new_head.address, "--db", fleet["db"], "--quiet",
            *fleet["credentials"], timeout=600,
        )  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        for name in NAMES:
            assert f"host {name}: experiment" in resumed.stderr and "done" in resumed.stderr, resumed.stderr
        experiments = _by_host(store)
        for name, record in experiments.items():
            runs = store.runs(record.id)
            assert record.status == "done", record
            assert sorted(r.trial for r in runs) == list(range(12))  # none lost, none twice
            kept = {r.id: (r.trial, r.started, r.wall_s) for r in before[name]}
            assert {r.id: (r.trial, r.started, r.wall_s) for r in runs if r.id in kept} == kept
            assert {r.facts["fleet_host"] for r in runs} == {name}
        again = cli(
            "run", "--resume", fleet_id, "--fleet", new_head.address, "--db", fleet["db"], "--quiet",
            *fleet["credentials"], timeout=120,
        )  # fmt: skip
        assert again.returncode == 2 and "nothing to resume" in again.stderr, again.stderr
    _nothing_left(fleet["root"])
