"""The plan: a TOML file naming stacks, workloads, repetitions and the baseline.

Validated with pydantic; every error becomes one line naming the file, the key and what
would be valid."""

import copy
import os
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from layerbench import stats
from layerbench.content import worlds
from layerbench.core.errors import UserError
from layerbench.plan import expansion, footprint
from layerbench.stacks.base import LayerOptions
from layerbench.stacks.base import load_kinds as load_layer_kinds
from layerbench.workloads.base import WorkloadOptions
from layerbench.workloads.base import load_kinds as load_workload_kinds

DEFAULT_PLAN = "builtin:default"
_UNION_TAG = re.compile(r"^(constrained-\w+|literal\[.*\]|int|str|float|bool)$")
AUTO_FIRST_REPS = 5  # reps = "auto" starts with these, then adds rounds
DURATION_PATTERN = r"^(off|[0-9]+(\.[0-9]+)?[smh])$"
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]


class StackSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    layers: list[dict[str, Any]] = Field(default_factory=list, max_length=16)
    description: str = ""
    world: str | None = None  # "host" or a path: a userland tree exposed to a jail
    sweep: Any = None  # option path -> values: one stack per value (see plan/expansion.py)
    incremental: bool = False  # also run every prefix of the layers (see plan/expansion.py)
    # { cpus = 1, memory = "3.5G" }: the options of a `limits` layer put on top of the others
    limits: dict[str, Any] | None = None

    @field_validator("world")
    @classmethod
    def _world(cls, value: str | None) -> str | None:
        return None if value is None else worlds.check_spec(value)


class _PlanFile(BaseModel):
    """The plan's shape as written; layers and workloads are checked by their kind."""

    model_config = ConfigDict(extra="forbid", strict=True)
    name: Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f]+$")]
    description: str = ""
    reps: Annotated[int, Field(ge=1, le=1000)] | Literal["auto"] = 5
    max_reps: int = Field(default=30, ge=2, le=1000)  # reps = "auto": stop here at the latest
    target_ci: float = Field(default=0.02, gt=0, lt=1)  # reps = "auto": wanted CI half-width of ratios
    # A time budget ("8m", "90s", "1h"; "off"): rounds added where comparisons are undecided.
    budget: Annotated[str, StringConstraints(pattern=DURATION_PATTERN)] | None = None
    looks: int = Field(default=stats.LOOKS, ge=1, le=50)  # budget: alpha is split among these
    cpus: list[Annotated[int, Field(ge=0, le=4095)]] | None = Field(default=None, min_length=1)
    warmup: int = Field(default=1, ge=0, le=100)
    # A stack's name, or one a sweep or an incremental stack expands to (`img[fs=xfs]`).
    baseline: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    order: Literal["interleaved", "sequential"] = "interleaved"
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    alpha: float = Field(default=stats.ALPHA, gt=0, le=0.5)  # per family of comparisons
    correction: Literal["holm", "bh", "none"] = stats.CORRECTION
    equivalence: float = Field(default=stats.EQUIVALENCE, ge=0, lt=1)  # a share: 0.1 is within +-10 %
    # budget: a comparison closes once its interval lies wholly above or below 1 + threshold
    # (is it slower by more than that?) instead of once the two-sided test decides it.
    threshold: float | None = Field(default=None, gt=0, lt=10)
    rerun_disturbed: int = Field(default=2, ge=0, le=10)  # re-runs of a trial other work disturbed
    settle: float = Field(default=0.1, ge=0, le=10)  # s of quiet devices before a timed run; 0: none
    settle_timeout: float = Field(default=10.0, gt=0, le=600)  # s: give up waiting (the run says so)
    sentinel: bool = True  # the drift probe between rounds
    warm_memory: bool = True  # hold what a run takes fresh until it starts (warm_memory.py)
    # and before letting go of it, wait for the pass of free page reporting already due (<= 2.1 s)
    wait_reporting_pass: bool = False
    stacks: dict[Name, StackSpec] = Field(min_length=1, max_length=64)
    workloads: dict[Name, dict[str, Any]] = Field(min_length=1, max_length=64)
    quick: dict[str, Any] = Field(default_factory=dict)
    bisect: dict[str, Any] | None = None  # for `layerbench bisect` (bisect/spec.py), not for run


class Plan(BaseModel):
    """A checked plan, ready to run."""

    name: str
    description: str
    reps: int  # with auto_reps: the first rounds, before any is added
    warmup: int
    auto_reps: bool = False
    max_reps: int = 30
    target_ci: float = 0.02
    budget_s: float | None = None  # a time budget: rounds added until decided or spent
    looks: int = stats.LOOKS
    cpus: list[int] | None = None  # pin the timed run to these CPUs
    baseline: str
    order: Literal["interleaved", "sequential"]
    seed: int | None
    alpha: float = stats.ALPHA
    correction: str = stats.CORRECTION
    equivalence: float = stats.EQUIVALENCE
    threshold: float | None = None
    rerun_disturbed: int = 2
    settle: float = 0.1
    settle_timeout: float = 10.0
    sentinel: bool = True
    warm_memory: bool = True
    wait_reporting_pass: bool = False
    stacks: dict[str, list[LayerOptions]]
    workloads: dict[str, WorkloadOptions]
    worlds: dict[str, str] = {}  # stack -> world spec, for stacks that carry one
    sweeps: dict[str, dict[str, Any]] = {}  # expanded stack -> its sweep's group and values
    increments: dict[str, dict[str, Any]] = {}  # stack -> the stack it adds one layer to
    source: str  # the file, or builtin:NAME
    text: str  # the TOML as given
    quick: bool = False  # --quick was given
    reps_override: int | None = None  # --reps was given
    budget_override: str | None = None  # --budget was given

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "reps": self.reps,
            "warmup": self.warmup,
            "baseline": self.baseline,
            "order": self.order,
            "seed": self.seed,
            "auto_reps": self.auto_reps,
            "max_reps": self.max_reps,
            "target_ci": self.target_ci,
            "budget_s": self.budget_s,
            "looks": self.looks,
            "cpus": self.cpus,
            "alpha": self.alpha,
            "correction": self.correction,
            "equivalence": self.equivalence,
            "threshold": self.threshold,
            "rerun_disturbed": self.rerun_disturbed,
            "settle": self.settle,
            "settle_timeout": self.settle_timeout,
            "sentinel": self.sentinel,
            "warm_memory": self.warm_memory,
            "wait_reporting_pass": self.wait_reporting_pass,
            "stacks": {n: [layer.model_dump() for layer in ls] for n, ls in self.stacks.items()},
            "workloads": {n: w.model_dump() for n, w in self.workloads.items()},
            # What `run --resume` needs to rebuild the very same schedule from the text.
            "run_options": {"quick": self.quick, "reps": self.reps_override, "budget": self.budget_override},
            "worlds": self.worlds,
            "sweeps": self.sweeps,
            "increments": self.increments,
        }


def _where(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "(top level)"


def _explain(exc: ValidationError, model: type[BaseModel], prefix: tuple[Any, ...]) -> str:
    error = exc.errors()[0]
    # Drop the union member tags pydantic adds ("reps.constrained-int").
    loc = prefix + tuple(part for part in error["loc"] if not _UNION_TAG.match(str(part)))
    if loc == ("reps",):
        return 'reps: a number of repetitions 1-1000, or "auto"'
    if error["type"] == "extra_forbidden":
        valid = ", ".join(k for k in model.model_fields if k != "kind") or "none"
        return f"{_where(loc)}: unknown key; valid keys here: {valid}"
    if error["type"] == "missing":
        return f"{_where(loc)}: required key is missing"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "string_pattern_mismatch" and loc and loc[-1] in ("name",):
        message = "must be one line without control characters"
    elif error["type"] == "string_pattern_mismatch":
        message = "a name must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
    return f"{_where(loc)}: {message}"


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _check_kind(
    raw: Any, registry: dict[str, Any], where: tuple[Any, ...], what: str, plan_dir: Path | None = None
) -> Any:
    if not isinstance(raw, dict):
        raise ValueError(f'{_where(where)}: a {what} is a table like {{ kind = "..." }}')
    kind = raw.get("kind")
    if kind not in registry:
        valid = ", ".join(sorted(registry))
        shown = f"{kind!r}" if kind is not None else "missing"
        raise ValueError(f"{_where((*where, 'kind'))}: {what} kind {shown}; valid kinds: {valid}")
    options_model = registry[kind].Options
    try:
        # plan_dir: where a path an option names (a fio job file) is relative to.
        return options_model.model_validate(raw, context={"plan_dir": plan_dir or Path.cwd()})
    except ValidationError as exc:
        raise ValueError(_explain(exc, options_model, where)) from None


def duration_seconds(value: str) -> float | None:
    """ "8m" -> 480.0, "90s", "1.5h"; "off" -> None."""
    if value == "off":
        return None
    number, unit = float(value[:-1]), value[-1]
    return number * {"s": 1, "m": 60, "h": 3600}[unit]


def parse_plan(
    text: str, source: str, *, quick: bool = False, reps: int | None = None, budget: str | None = None
) -> Plan:
    """Check a plan; raise UserError with one line naming source and key."""
    try:
        shape, has_quick_table = _shape(text, quick)
        if shape.bisect is not None:
            raise ValueError(
                "bisect: a plan with a [bisect] table runs with `layerbench bisect PLAN --good G --bad B`"
            )
        expanded = _expand(shape)
        stacks, workloads = _kinds(shape, None if source.startswith("builtin:") else Path(source).parent)
        baseline = shape.baseline or next(iter(shape.stacks))
        if baseline not in stacks:
            raise ValueError(f"baseline: {baseline!r} names no stack; stacks: {', '.join(stacks)}")
        plan_worlds = _worlds(shape, workloads)
        if refusal := footprint.plan_refusal(stacks, workloads):
            raise ValueError(refusal)
        if refusal := _keeping_refusal(stacks, workloads):
            raise ValueError(refusal)
        if budget is not None and not re.fullmatch(DURATION_PATTERN, budget):
            raise ValueError(f"--budget {budget!r}: a duration such as 90s, 8m or 1h, or off")
        budget_s = duration_seconds(budget or shape.budget or "off")
        if budget_s is not None and shape.reps == "auto" and reps is None:
            raise ValueError('budget: reps = "auto" adds rounds its own way; give one of the two')
        if shape.cpus and any(cpu not in (usable := sorted(os.sched_getaffinity(0))) for cpu in shape.cpus):
            raise ValueError(f"cpus: {shape.cpus} names a CPU this host lacks; usable: {usable}")
    except ValueError as exc:
        raise UserError(f"{source}: {exc}") from None
    auto_reps = shape.reps == "auto" and reps is None
    planned_reps = shape.reps if isinstance(shape.reps, int) else min(AUTO_FIRST_REPS, shape.max_reps)
    run_reps = reps if reps is not None else planned_reps
    if quick and not has_quick_table:
        run_reps = min(run_reps, 5)
    keys = (
        *("name", "description", "warmup", "order", "seed", "alpha", "correction", "equivalence"),
        *("threshold", "settle", "settle_timeout", "sentinel", "warm_memory", "wait_reporting_pass"),
    )
    return Plan(
        **{key: getattr(shape, key) for key in keys},
        reps=run_reps,
        baseline=baseline,
        rerun_disturbed=shape.rerun_disturbed,
        auto_reps=auto_reps,
        max_reps=shape.max_reps,
        target_ci=shape.target_ci,
        budget_s=budget_s,
        looks=shape.looks,
        cpus=shape.cpus,
        stacks=stacks,
        workloads=workloads,
        worlds=plan_worlds,
        sweeps={name: point.as_dict() for name, point in expanded.sweeps.items()},
        increments={name: step.as_dict() for name, step in expanded.increments.items()},
        source=source,
        text=text,
        quick=quick,
        reps_override=reps,
        budget_override=budget,
    )


def _shape(text: str, quick: bool) -> tuple[_PlanFile, bool]:
    """The plan file's shape, with its [quick] table merged in when asked; and whether it
    has one."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML: {exc}") from None
    try:
        shape = _PlanFile.model_validate(raw)
        has_quick_table = bool(shape.quick)
        if quick and has_quick_table:
            merged = _deep_merge({k: v for k, v in raw.items() if k != "quick"}, shape.quick)
            shape = _PlanFile.model_validate(merged)
    except ValidationError as exc:
        raise ValueError(_explain(exc, _PlanFile, ())) from None
    return shape, has_quick_table


def _expand(shape: _PlanFile) -> expansion.Expanded:
    """The stacks as they run: sweeps and incremental stacks expanded (shape.stacks is
    replaced by them)."""
    layer_kinds = load_layer_kinds()
    for name, spec in shape.stacks.items():
        if spec.limits is not None:
            _check_kind({"kind": "limits", **spec.limits}, layer_kinds, ("stacks", name, "limits"), "layer")
    expanded = expansion.expand(
        {name: spec.model_dump(exclude_defaults=True) for name, spec in shape.stacks.items()},
        layer_option_names,
    )
    shape.stacks = {
        name: StackSpec.model_validate(_limits_on_top(expansion.strip(table)))
        for name, table in expanded.stacks.items()
    }
    return expanded


def layer_option_names(kind: str) -> list[str] | None:
    """A layer kind's option names (None: no such kind), as an option path may name them."""
    known = load_layer_kinds().get(kind)
    return None if known is None else [k for k in known.Options.model_fields if k != "kind"]


def _limits_on_top(table: dict[str, Any]) -> dict[str, Any]:
    """A stack's limits are a `limits` layer on top of its layers: the workload runs within
    them, whatever the layers below are."""
    limits = table.get("limits")
    if not limits:
        return table
    rest = {key: value for key, value in table.items() if key != "limits"}
    return {**rest, "layers": [*table.get("layers", []), {"kind": "limits", **limits}]}


def _kinds(
    shape: _PlanFile, plan_dir: Path | None
) -> tuple[dict[str, list[LayerOptions]], dict[str, WorkloadOptions]]:
    """Every layer and workload checked by the options of its kind."""
    layer_kinds = load_layer_kinds()
    workload_kinds = load_workload_kinds()
    stacks = {
        name: [
            _check_kind(layer, layer_kinds, ("stacks", name, "layers", i), "layer")
            for i, layer in enumerate(spec.layers)
        ]
        for name, spec in shape.stacks.items()
    }
    workloads = {
        name: _check_kind(body, workload_kinds, ("workloads", name), "workload", plan_dir)
        for name, body in shape.workloads.items()
    }
    return stacks, workloads


def _keeping_refusal(
    stacks: dict[str, list[LayerOptions]], workloads: dict[str, WorkloadOptions]
) -> str | None:
    """A workload with keep_stack = true repeats on one built stack: its kind must be one that
    can, and every stack one that can be kept."""
    kept = [(name, options) for name, options in workloads.items() if options.keep_stack]
    if not kept:
        return None
    layer_kinds, workload_kinds = load_layer_kinds(), load_workload_kinds()
    for name, options in kept:
        if not workload_kinds[options.kind].reusable:
            kinds = ", ".join(sorted(k for k, kind in workload_kinds.items() if kind.reusable))
            return (
                f"workloads.{name}.keep_stack: a {options.kind} workload needs a stack of its own "
                f"for each trial; the kinds that repeat on a kept stack: {kinds}"
            )
    for stack, layers in stacks.items():
        if fresh := [layer.kind for layer in layers if not layer_kinds[layer.kind].keepable]:
            return (
                f"workloads.{kept[0][0]}.keep_stack: stack {stack}'s {fresh[0]} layer is built for "
                "each trial, so no stack of the plan is kept; drop keep_stack"
            )
    return None


def _worlds(shape: _PlanFile, workloads: dict[str, WorkloadOptions]) -> dict[str, str]:
    """stack -> world spec; a workload that runs in a chroot needs one on every stack."""
    plan_worlds = {name: spec.world for name, spec in shape.stacks.items() if spec.world}
    workload_kinds = load_workload_kinds()
    for name, body in workloads.items():
        lacking = [s for s in shape.stacks if s not in plan_worlds]
        if workload_kinds[body.kind].needs_world and lacking:
            raise ValueError(
                f"stacks.{lacking[0]}.world: workload {name} ({body.kind}) runs in a "
                'chroot; give every stack a world (world = "host" or a path)'
            )
    return plan_worlds


def load_plan(
    path: str | None, *, quick: bool = False, reps: int | None = None, budget: str | None = None
) -> Plan:
    """Read a plan file, or the built-in default plan when path is None."""
    if path is None or path == DEFAULT_PLAN:
        text = resources.files("layerbench.plan").joinpath("default.toml").read_text()
        return parse_plan(text, DEFAULT_PLAN, quick=quick, reps=reps, budget=budget)
    return parse_plan(read_plan_file(path), str(path), quick=quick, reps=reps, budget=budget)


def read_plan_file(path: str) -> str:
    """A plan file's text; one line naming it when it cannot be read."""
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise UserError(f"{path}: no such plan file") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file (a plan is TOML, UTF-8)") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
