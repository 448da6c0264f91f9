"""What a trial hands the store: one typed TrialResult per trial (its run's counters, the
work it did, its facts) and the StackRecord of the stack it ran on. Executors make them;
the store writes them. And what the store hands back of an experiment: its
ExperimentRecord."""

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from pydantic import BaseModel, ConfigDict, TypeAdapter

from layerbench import stats
from layerbench.core.facts import JSON, Fact, declare
from layerbench.core.runs import DISTURBED, RERUN
from layerbench.observe.measure import RunCounters
from layerbench.plan.expansion import Increment, SweepPoint
from layerbench.plan.schedule import Trial

SAMPLER = Fact("sampler", "during", "the time-series sampler's own cost over the run", dict[str, float])
declare(SAMPLER)


@dataclass(frozen=True)
class StackRecord:
    """What a stack was when built: for the reports' Config block."""

    # A key a store of an older layerbench lacks reads empty.
    layers: list[str] = field(default_factory=list)
    mount_lines: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    top: str = ""
    world: str | None = None

    @classmethod
    def stored(cls, info: JSON) -> "StackRecord":
        """As the experiments table keeps it, checked."""
        return _STORED_STACK.validate_python(info)

    def as_dict(self) -> dict[str, object]:
        return {
            "layers": self.layers,
            "mount_lines": self.mount_lines,
            "devices": self.devices,
            "top": self.top,
            "world": self.world,
        }


_STORED_STACK = TypeAdapter(StackRecord)


@dataclass
class TrialResult:
    """One trial's run: what the store keeps of it, in one piece."""

    trial: Trial
    started: str
    counters: RunCounters
    units: float | None = None  # the work the run did, for its throughput
    unit: str | None = None
    facts: dict[str, object] = field(default_factory=dict)  # the workload's and the noise's
    stack: StackRecord | None = None
    reported: dict[str, float] = field(default_factory=dict)  # metrics.reported(): the workload's own

    @property
    def throughput(self) -> float | None:
        ok = self.counters.status == "ok" and self.units and self.counters.wall_s > 0
        return self.units / self.counters.wall_s if ok and self.units else None

    @property
    def disturbed(self) -> bool:
        """Other work used the CPU while the run was timed (the noise facts of the run)."""
        return bool(DISTURBED.read(self.counters.facts) or DISTURBED.read(self.facts))

    def row(self) -> dict[str, object]:
        """The runs-table row: the trial, the counters, the work."""
        counters = self.counters
        row: dict[str, object] = {
            name: getattr(counters, name)
            for name in counters.__dataclass_fields__
            if name not in ("devices", "samples", "sampler", "facts")
        }
        row.update(
            trial=self.trial.index,
            stack=self.trial.stack,
            workload=self.trial.workload,
            rep=self.trial.rep,
            warmup=int(self.trial.warmup),
            started=self.started,
        )
        if self.throughput is not None:
            row.update(units=self.units, unit=self.unit, throughput=self.throughput)
        if self.counters.status == "ok":
            row.update(self.reported)
        return row

    def all_facts(self) -> dict[str, object]:
        """The facts stored with the run: the workload's, the noise's, the sampler's cost."""
        facts = {**self.facts, **self.counters.facts}
        if self.counters.sampler:
            facts[SAMPLER.key] = self.counters.sampler
        if self.trial.rerun:
            facts[RERUN.key] = self.trial.rerun
        return facts


class RunOptions(BaseModel):
    """The command line's say over the plan (`run --quick/--reps/--budget`): what a resume
    gives the plan's text again to rebuild the very same schedule."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    quick: bool = False
    reps: int | None = None
    budget: str | None = None


# The margin a results file that does not store one was decided with (the default until
# the default became stats.EQUIVALENCE).
LEGACY_EQUIVALENCE = 0.05


class StoredPlan(BaseModel):
    """The plan as an experiment ran it (plan.Plan.as_dict(), expanded: sweeps and
    increments made into stacks), read back typed. Not parsed again from its text: parsing
    checks today's options and this host (archives, worlds), and a results file must read the
    same on another machine and after an upgrade. A key that a results file of an older
    layerbench lacks has the default that layerbench behaved as; every stored key is kept
    (an export dumps them all)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    name: str = ""
    reps: int = 0
    warmup: int = 0
    baseline: str = ""
    order: str = "interleaved"
    seed: int | None = None
    alpha: float = stats.ALPHA
    correction: str = stats.CORRECTION
    equivalence: float = LEGACY_EQUIVALENCE
    stacks: dict[str, list[dict[str, JSON]]] = {}  # name -> its layers' options, bottom first
    workloads: dict[str, dict[str, JSON]] = {}  # name -> its options, "kind" among them
    run_options: RunOptions = RunOptions()
    sweeps: dict[str, SweepPoint] = {}  # an expanded stack -> the sweep it is a point of
    increments: dict[str, Increment] = {}  # stack -> the stack it adds one layer to

    def kind_of(self, workload: str) -> str:
        return str(self.workloads[workload]["kind"])

    def sweep_values(self, stack: str) -> dict[str, object]:
        """The values a swept stack was made with (none for a stack of no sweep)."""
        point = self.sweeps.get(stack)
        return dict(point.values) if point else {}


class DiskRecord(BaseModel):
    """The disk under the scratch root (observe.host's description of it)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    name: str = "?"
    model: str = "unknown"
    scheduler: str = "?"
    rotational: bool | None = None
    size_bytes: int = 0


class HostRecord(BaseModel):
    """The host an experiment ran on (observe.host.describe()), read back typed. A key a
    results file of an older layerbench, or a fleet's host, lacks reads None (or empty);
    every stored key is kept for the export and the comparison of two hosts."""

    model_config = ConfigDict(frozen=True, extra="allow")

    hostname: str | None = None
    cpu_model: str | None = None
    cpus: int | None = None
    memory_bytes: int | None = None
    kernel: str | None = None
    kernel_version: str | None = None
    distribution: str | None = None
    virtualization: str | None = None
    scratch_root: str | None = None
    scratch_fs: dict[str, JSON] = {}  # observe.fsstate.describe(): the file system's state
    disks: list[DiskRecord] = []
    free_page_reporting_order: int | None = None  # free blocks of 2**order pages go back to the hypervisor
    damon_schemes: list[dict[str, JSON]] = []  # linux.damon.Scheme.as_json() of each running scheme
    python: str | None = None
    layerbench: str | None = None
    tools: dict[str, str | None] = {}

    def facts(self) -> dict[str, object]:
        """Every key as stored, for an export and for telling two hosts apart."""
        return self.model_dump(exclude_unset=True)


@dataclass(frozen=True)
class ExperimentRecord:
    """A stored experiment as every reader sees it: the experiments table's columns with their
    JSON decoded, and the experiment's facts (key -> value)."""

    id: int
    name: str
    status: str
    plan_source: str
    plan_text: str
    plan: StoredPlan
    seed: int
    baseline: str
    started: str
    finished: str | None
    host: HostRecord
    stacks: dict[str, StackRecord]  # each stack as it was built (its first trial's)
    warnings: list[str]
    version: str
    pid: int | None = None
    fleet: str | None = None
    host_name: str | None = None
    owner: str | None = None
    status_reason: str | None = None
    facts: Mapping[str, JSON] = field(default_factory=dict)  # the experiment's own (stats.sequential ...)

    def header(self, *keys: str) -> dict[str, object]:
        """Some of its fields by name, for an export's header."""
        return {key: getattr(self, key) for key in keys}


@dataclass(frozen=True)
class SampleRecord:
    """One interval of a run's time series as stored (observe.sampling.Sample's fields): what
    happened in the dt_s seconds up to t_s. A counter a results file of an older layerbench
    lacks reads None, never 0."""

    t_s: float
    dt_s: float
    read_bytes: int | None
    write_bytes: int | None
    disk_read_bytes: int | None
    disk_write_bytes: int | None
    cpu_busy_pct: float | None
    cpu_iowait_pct: float | None
    dirty_bytes: int | None
    disk_in_flight: int | None

    def per_second(self, amount: int | float | None) -> float:
        """An amount of this interval as a rate (0 for an empty interval or a missing one)."""
        return amount / self.dt_s if amount is not None and self.dt_s > 0 else 0.0

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


@dataclass(frozen=True)
class ExperimentSummary:
    """An experiment as the history lists it: who, when, what it ran, how many runs it stored."""

    id: int
    name: str
    status: str
    status_reason: str | None
    started: str
    finished: str | None
    baseline: str
    fleet: str | None
    host_name: str | None  # the fleet's name of the host, else None
    runs: int
    host: str | None  # the fleet's name of the host, else its hostname
    kernel: str | None
    stacks: list[str]
    workloads: list[str]
    # history: this experiment against the previous finished one of its plan (compare.trends)
    against_previous: "Trend | None" = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Trend:
    """An experiment against the previous finished experiment of the same plan, as compare
    puts it: did the host move, and how many of the relative costs repeat."""

    previous: int  # that experiment's id
    relative_reach: float | None  # how far apart two relative costs can be and still agree
    host_changed: bool
    line: str | None  # the drift line (None: nothing moved)
    relative_agree: int
    relative_compared: int


@dataclass(frozen=True)
class FleetMember:
    """One host's experiment of a fleet."""

    id: int
    host_name: str
    status: str
    status_reason: str | None


@dataclass(frozen=True)
class FleetRecord:
    """A fleet: one plan run on several hosts, each host's experiment by its name."""

    id: str
    name: str
    plan_source: str
    started: str
    reference: str  # the host the others are compared against
    hosts: list[str]  # in the order they were named
    experiments: dict[str, FleetMember]  # host name -> its experiment (hosts that stored one)


# ---- a bisect: its variants, the comparisons it made, and what it found -----------------


class BisectVariant(BaseModel):
    """One variant: a git revision (name: the commit) or a named set of option values."""

    label: str  # its stack's name in the comparisons, e.g. "r03-1a2b3c4d"
    name: str
    title: str = ""  # a commit's subject line
    build: str | None = None  # None: not built yet; "ok"; else why it did not build


class BisectStep(BaseModel):
    """One comparison: the candidate against the current good end, one experiment."""

    reference: int  # variant indices
    candidate: int
    verdict: str  # slower, not slower, undecided, skipped
    experiment: int | None = None
    ratio: float | None = None  # candidate / reference, its interval and the interval's level
    low: float | None = None
    high: float | None = None
    level: float | None = None
    reps: int = 0  # repetitions of each side measured
    seconds: float = 0.0
    note: str = ""  # why skipped or undecided


class BisectBoundary(BaseModel):
    last: int  # the last variant of the old class
    first: int  # the first of the new one
    direction: str  # slower (good -> bad) or faster (bad -> good: the cost went back down)
    confirmed: bool | None  # the two compared side by side; None: not adjacent


class BisectState(BaseModel):
    """What a bisect knows; stored as it grows."""

    stack: str
    workload: str
    metric: str
    margin: float
    probes: int
    variants: list[BisectVariant]
    steps: list[BisectStep] = []
    ends: str | None = None  # the bad end against the good one, once compared
    boundaries: list[BisectBoundary] = []

    def step(self, reference: int, candidate: int) -> BisectStep | None:
        return next((s for s in self.steps if (s.reference, s.candidate) == (reference, candidate)), None)


class BisectRecord(BaseModel):
    id: int
    name: str
    plan_source: str
    plan_text: str
    good: str
    bad: str
    status: str  # running, done, interrupted, failed
    started: str
    finished: str | None = None
    pid: int | None = None
    owner: str | None = None
    state: BisectState
