#!/usr/bin/env python3
"""The fleet's coordinator at a scale this machine cannot host: simulated hosts.

    python3 bench/fleet.py [--hosts 20,50,200] [--nodes 2] [--reps 2]

For each number of hosts: a local Ray cluster of --nodes nodes (on loopback, with the
fleet's token and bind filter: layerbench.fleet.local) carrying one `lb-host:NAME`
resource per simulated host, a 10-stack x 3-workload plan on every host (FakeExecutor
trials: no measurement, so what is timed is the coordination), every run into a
throwaway PostgreSQL (tests/postgres.py). It checks that every host's trials ran strictly
one at a time, none lost and none duplicated, each on its own host, then prints as a
Markdown table: trials, trials/s ingested, the end-to-end latency per trial (from the head
starting it to its run committed; p50 and p99), the head's CPU time per trial and its
peak memory (VmHWM of the head process, Ray's driver included).
Needs root (PostgreSQL runs as the postgres user) and the postgresql package.
"""

import argparse
import itertools
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import postgres

from layerbench.fleet import coordinator, credentials, hosts, local
from layerbench.fleet.requests import FLEET_HOST, HOST_FINISHED, HOST_STARTED
from layerbench.plan import parse_plan
from layerbench.plan.schedule import Trial
from layerbench.store import Store
from layerbench.store.records import TrialResult

STACKS, WORKLOADS = 10, 3


def plan_text(reps: int) -> str:
    stacks = "\n".join(f"[stacks.s{i}]\nlayers = []\n" for i in range(STACKS))
    workloads = "\n".join(f'[workloads.w{i}]\nkind = "command"\nrun = "true"\n' for i in range(WORKLOADS))
    return (
        f'name = "fleet-bench"\nbaseline = "s0"\nreps = {reps}\nwarmup = 0\nsentinel = false\n'
        f"rerun_disturbed = 0\n{stacks}\n{workloads}"
    )


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def verify(store: Store, outcome: coordinator.FleetOutcome, expected: int) -> None:
    """Every host: all its trials, once each, on itself, one after another."""
    for host in outcome.hosts:
        runs = store.runs(host.experiment_id)
        trials = sorted(r.trial for r in runs)
        assert host.status == "done", (host.host, host.status, host.detail)
        assert trials == list(range(expected)), (host.host, len(trials))
        assert {r.fact(FLEET_HOST) for r in runs} == {host.host}
        spans = sorted((r.fact(HOST_STARTED) or 0.0, r.fact(HOST_FINISHED) or 0.0) for r in runs)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans)), host.host


def one_size(
    count: int, nodes: int, reps: int, server: postgres.Cluster, fleet_credentials: credentials.Credentials
) -> dict[str, float]:
    names = [f"h{i:03d}" for i in range(count)]
    per_node = [names[node::nodes] for node in range(nodes)]
    with local.loopback_cluster(
        fleet_credentials, per_node, Path("/nonexistent"), cpus_per_node=4, simulated=True
    ):
        store = Store(server.create_database(f"bench{count}"))
        plan = parse_plan(plan_text(reps), "bench/fleet.py")
        started: dict[tuple[str, int], float] = {}
        latencies: list[float] = []

        def progress(host: str, trial: Trial, total: int, result: TrialResult | None) -> None:
            if result is None:
                started[(host, trial.index)] = time.perf_counter()
            else:
                latencies.append(time.perf_counter() - started[(host, trial.index)])

        cpu_before = resource.getrusage(resource.RUSAGE_SELF)
        begin = time.perf_counter()
        outcome = coordinator.run_fleet(plan, store, hosts.select("all"), progress=progress, seed=1)
        wall = time.perf_counter() - begin
        cpu_after = resource.getrusage(resource.RUSAGE_SELF)
        trials = STACKS * WORKLOADS * reps
        verify(store, outcome, trials)
        cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
        total = trials * count
        latencies.sort()
        return {
            "hosts": count,
            "trials": total,
            "wall_s": wall,
            "per_s": total / wall,
            "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "cpu_ms": 1000 * cpu / total,
            "rss_mib": peak_rss_mib(),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="20,50,200", help="numbers of simulated hosts, comma-separated")
    parser.add_argument("--nodes", type=int, default=2, help="local Ray nodes carrying them")
    parser.add_argument("--reps", type=int, default=2, help="measured repetitions of the plan")
    parser.add_argument(
        "--scratch", type=Path, default=Path("/var/tmp/layerbench-bench-fleet"),
        help="made for the PostgreSQL cluster and the fleet's credentials, removed at the end",
    )  # fmt: skip
    args = parser.parse_args()
    if reason := postgres.missing():
        print(f"bench/fleet.py: {reason}", file=sys.stderr)
        return 2
    rows = []
    args.scratch.mkdir(parents=True)
    try:
        with (
            postgres.cluster(args.scratch) as server,
            local.loopback_credentials(args.scratch) as fleet_credentials,
        ):
            for count in (int(c) for c in args.hosts.split(",")):
                rows.append(one_size(count, args.nodes, args.reps, server, fleet_credentials))
                print(
                    f"# {count} hosts: verified (every trial once, on its host, one at a time)",
                    file=sys.stderr,
                )
    finally:
        shutil.rmtree(args.scratch)
    print(
        f"{STACKS} stacks x {WORKLOADS} workloads x {args.reps} reps per host, {args.nodes} local Ray nodes, "
        "PostgreSQL store; every host's trials verified strictly sequential, none lost or duplicated\n"
    )
    print(
        "| hosts | trials | wall s | trials/s ingested | latency p50 ms | latency p99 ms | head CPU ms/trial"
        " | head peak MiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['hosts']} | {r['trials']} | {r['wall_s']:.1f} | {r['per_s']:.0f} | {r['p50_ms']:.0f} |"
            f" {r['p99_ms']:.0f} | {r['cpu_ms']:.1f} | {r['rss_mib']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
