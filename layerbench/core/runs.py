"""A stored run as every reader sees it (statistics, analysis, reports, the results browser):
its identity typed, its counters by the metrics registry's names. The store makes them from
its rows; tests make them with from_row()."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from layerbench.core import metrics
from layerbench.core.facts import JSON, Fact, declare

T = TypeVar("T")

# The facts the statistics themselves rely on (a disturbed run is left out; a re-run stands in
# for one), declared here, below every layer that writes or reads them.
DISTURBED = Fact(
    "disturbed", "during", "other work took more than a quarter of the CPUs during the run", bool
)
RERUN = Fact("rerun", "before", "this trial reran a disturbed one (which, and why)", int)
declare(DISTURBED, RERUN)

# The runs table's columns besides the counters, in order.
IDENTITY = ("trial", "stack", "workload", "rep", "warmup", "status", "error", "exit_code", "started")


@dataclass(frozen=True)
class RunRecord:
    """One run: which trial it was, how it ended, what it measured. A counter the run did not
    measure (or a results file of an older layerbench lacks) reads None, never 0."""

    trial: int
    stack: str
    workload: str
    status: str
    rep: int = 0
    warmup: bool = False
    started: str = ""
    error: str | None = None
    exit_code: int | None = None
    units: float | None = None  # the work the run did, in `unit`s (throughput = units / wall_s)
    unit: str | None = None
    # metric name (metrics.METRICS, throughput included) -> value
    values: Mapping[str, float | int | None] = field(default_factory=dict)
    # device -> its counters over the run
    devices: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    facts: Mapping[str, JSON] = field(default_factory=dict)  # key -> value (core.facts)
    id: int | None = None  # the store's ids (None for a run not read from a store)
    experiment_id: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "RunRecord":
        """From a row of the runs table (devices and facts decoded); a missing counter is None."""
        return cls(
            trial=int(row.get("trial", 0)),
            stack=str(row["stack"]),
            workload=str(row["workload"]),
            status=str(row["status"]),
            rep=int(row.get("rep") or 0),
            warmup=bool(row.get("warmup")),
            started=str(row.get("started") or ""),
            error=row.get("error"),
            exit_code=row.get("exit_code"),
            units=row.get("units"),
            unit=row.get("unit"),
            values={m.name: row.get(m.name) for m in metrics.METRICS},
            devices=dict(row.get("devices") or {}),
            facts=dict(row.get("facts") or {}),
            id=row.get("id"),
            experiment_id=row.get("experiment_id"),
        )

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def measured(self) -> bool:
        """An ok run that is not a warm-up: what the statistics count."""
        return self.ok and not self.warmup

    @property
    def wall_s(self) -> float:
        """The elapsed time: every run that ran has it (a failed one too)."""
        return self.required("wall_s")

    def value(self, metric: str) -> float | None:
        """The run's value of a metric (None: not measured)."""
        if metric not in metrics.BY_NAME:
            raise KeyError(f"{metric!r} is not a registered metric")
        return self.values.get(metric)

    def required(self, metric: str) -> float:
        """A metric every such run measures: its absence is a bug, not a gap."""
        found = self.value(metric)
        if found is None:
            raise ValueError(f"run of trial {self.trial} has no {metric}")
        return float(found)

    def has(self, metric: str) -> bool:
        return self.value(metric) is not None

    def fact(self, fact: Fact[T]) -> T | None:
        """The run's value of a declared fact, of its declared type (None: the run has none)."""
        return fact.read(self.facts)

    def with_values(self, **values: float | int | None) -> "RunRecord":
        """The same run with some counters replaced (a test's, or a derived reading)."""
        return replace(self, values={**self.values, **values})

    def row(self) -> dict[str, object]:
        """As a flat row of the runs table (identity, every counter, units, unit): for an
        export."""
        return {
            **{name: getattr(self, name) for name in IDENTITY},
            **{name: self.values.get(name) for name in metrics.column_names()},
            "units": self.units,
            "unit": self.unit,
            "throughput": self.values.get("throughput"),
        }


def known(runs: Iterable[RunRecord], metric: str) -> list[float]:
    """A metric's values over the runs that measured it, in their order."""
    return [value for run in runs if (value := run.value(metric)) is not None]
