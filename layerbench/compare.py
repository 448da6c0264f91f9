"""Two experiments side by side (the same plan on two kernels, two machines, two months):
per (stack, workload) the ratio B/A of median wall times with a 95 % bootstrap CI and a
Mann-Whitney verdict, and the host metadata that differs."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerbench import stats
from layerbench.errors import UserError
from layerbench.store import Store

METRIC = "wall_s"


@dataclass
class Side:
    db: Path
    experiment: dict[str, Any]
    runs: list[dict[str, Any]]

    @property
    def label(self) -> str:
        return (
            f"{self.experiment['id']} ({self.experiment['name']}, {self.experiment['host'].get('hostname')})"
        )

    def pairs(self) -> list[tuple[str, str]]:
        plan = self.experiment["plan"]
        return [(s, w) for w in plan["workloads"] for s in plan["stacks"]]


@dataclass
class Comparison:
    a: Side
    b: Side
    rows: list[stats.Summary]  # ratio = B / A; verdict says how B fares against A
    host_differences: list[tuple[str, Any, Any]]
    only_in_a: list[tuple[str, str]]
    only_in_b: list[tuple[str, str]]
    plans_differ: bool

    def as_dict(self) -> dict[str, Any]:
        def side(s: Side) -> dict[str, Any]:
            keys = ("id", "name", "status", "started", "finished", "baseline")
            return {k: s.experiment[k] for k in keys} | {"db": str(s.db), "host": s.experiment["host"]}

        return {
            "schema_version": 1,
            "metric": METRIC,
            "a": side(self.a),
            "b": side(self.b),
            "rows": [row.as_dict() for row in self.rows],
            "host_differences": [{"key": k, "a": va, "b": vb} for k, va, vb in self.host_differences],
            "only_in_a": [{"stack": s, "workload": w} for s, w in self.only_in_a],
            "only_in_b": [{"stack": s, "workload": w} for s, w in self.only_in_b],
            "plans_differ": self.plans_differ,
        }


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"scratch_fs": {"type": "ext4"}} -> {"scratch_fs.type": "ext4"}; lists by index."""
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat |= flatten(item, f"{prefix}{key}.")
        return flat
    if isinstance(value, list):
        flat = {}
        for index, item in enumerate(value):
            flat |= flatten(item, f"{prefix}{index}.")
        return flat
    return {prefix.rstrip("."): value}


def host_differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    flat_a, flat_b = flatten(a), flatten(b)
    return [
        (key, flat_a.get(key), flat_b.get(key))
        for key in sorted(flat_a.keys() | flat_b.keys())
        if flat_a.get(key) != flat_b.get(key)
    ]


def load_side(db: Path, experiment_id: int | None) -> Side:
    store = Store(db)
    try:
        ident = experiment_id if experiment_id is not None else store.latest_experiment_id()
        if ident is None:
            raise UserError(f"{db}: holds no experiment yet")
        return Side(db, store.experiment(ident), store.runs(ident))
    finally:
        store.close()


def compare(a: Side, b: Side) -> Comparison:
    groups_a, groups_b = stats.measured(a.runs), stats.measured(b.runs)
    pairs_a, pairs_b = a.pairs(), b.pairs()
    entries = [
        (
            stack,
            workload,
            [r[METRIC] for r in groups_b.get((stack, workload), [])],
            [r[METRIC] for r in groups_a.get((stack, workload), [])],
        )
        for stack, workload in pairs_b
        if (stack, workload) in pairs_a
    ]
    # A is the reference for B: every pair present in both is one comparison of one family.
    rows = stats.compare_samples(entries, METRIC, stats.Design.of_plan(b.experiment["plan"]))
    return Comparison(
        a=a,
        b=b,
        rows=rows,
        host_differences=host_differences(a.experiment["host"], b.experiment["host"]),
        only_in_a=[p for p in pairs_a if p not in pairs_b],
        only_in_b=[p for p in pairs_b if p not in pairs_a],
        plans_differ=a.experiment["plan"] != b.experiment["plan"],
    )
