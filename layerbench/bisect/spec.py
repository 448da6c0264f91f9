"""A plan's `[bisect]` table, and the plan of one comparison made from it.

    [bisect]
    stack = "fs"                # the stack whose variants are compared (default: the only one)
    workload = "write"          # the workload they run (default: the only one)
    metric = "wall_s"           # what "slower" is measured in
    margin = 0.05               # slower: the ratio's interval lies wholly above 1 + margin
    budget = "3m"               # each comparison's time budget (the sequential design's)
    probes = 4                  # looks inside stretches of one class (0: a plain bisect)
    # the variants: revisions of a git repository, each built ...
    repo = "daemon-src"         # relative to the plan file
    build = "make -j2"          # run in a checkout of each revision ("": nothing to build)
    # ... or named sets of option values, in order (option paths as a sweep's)
    variants = [{ name = "v1", set = { "layers.1.kernel_cache" = false } }, ...]

A revision's checkout is `{checkout}` in the stack's layer options (a FUSE daemon's command
line, say). A comparison is an ordinary plan: the stack twice (the current good end as the
baseline, the candidate), the one workload, the comparison's budget and the margin as its
threshold; it runs and is stored as any experiment."""

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from layerbench.core.errors import UserError
from layerbench.plan import DURATION_PATTERN, Name, expansion, layer_option_names, parse_plan, read_plan_file
from layerbench.plan import Plan as CheckedPlan

CHECKOUT = "{checkout}"


class NamedVariant(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: Name
    set: dict[str, Any] = {}  # option path ("layers.N.KEY") -> value


class BisectSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    stack: Name | None = None
    workload: Name | None = None
    metric: Literal["wall_s"] = "wall_s"
    margin: float = Field(default=0.05, gt=0, lt=10)
    budget: Annotated[str, StringConstraints(pattern=DURATION_PATTERN)] = "5m"
    probes: int = Field(default=4, ge=0, le=20)
    repo: str | None = None
    build: str = ""
    variants: list[NamedVariant] | None = Field(default=None, min_length=2, max_length=1000)

    @model_validator(mode="after")
    def _one_kind_of_variant(self) -> "BisectSpec":
        if (self.repo is None) == (self.variants is None):
            raise ValueError("give either repo (and build) for git revisions, or variants = [...], not both")
        if self.variants is not None and self.build:
            raise ValueError("build: only with repo (named variants are built by nothing)")
        if self.budget == "off":
            raise ValueError('budget: each comparison needs a time budget, like "3m"')
        if self.variants is not None and len({v.name for v in self.variants}) != len(self.variants):
            raise ValueError("variants: a name is given twice")
        return self


class BisectPlan:
    """The plan file of a bisect: its `[bisect]` table checked, and comparisons made from it."""

    def __init__(self, text: str, source: str) -> None:
        self.text, self.source = text, source
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"{source}: not valid TOML: {exc}") from None
        table = raw.pop("bisect", None)
        if table is None:
            raise UserError(
                f"{source}: no [bisect] table; `layerbench bisect` needs one (see docs/bisect.md)"
            )
        try:
            self.spec = BisectSpec.model_validate(table)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "(the table)"
            raise UserError(
                f"{source}: bisect.{where}: {error['msg'].removeprefix('Value error, ')}"
            ) from None
        raw.pop("quick", None)
        self.raw = raw
        self.stack = self._only("stack", self.spec.stack)
        self.workload = self._only("workload", self.spec.workload)
        layers = self.raw["stacks"][self.stack].get("layers", [])
        if self.spec.repo is not None and _replaced(layers, CHECKOUT, "") == layers:
            raise UserError(
                f"{source}: stacks.{self.stack}: no layer option holds {CHECKOUT}, so every revision "
                "would run the same stack; put the build's path in one (a FUSE daemon's command line)"
            )
        for variant in self.spec.variants or []:
            self.stack_of(variant.name, set_values=variant.set)  # a bad path: refused now

    @classmethod
    def load(cls, path: str) -> "BisectPlan":
        text = read_plan_file(path)
        # Stored with the bisect as an absolute path: its repository is found relative to
        # it, also by a resume from another directory.
        return cls(text, str(Path(path).resolve()))

    def _only(self, what: str, named: str | None) -> str:
        tables = self.raw.get(f"{what}s")
        if not isinstance(tables, dict) or not tables:
            raise UserError(f"{self.source}: {what}s: the plan has none")
        if named is None:
            if len(tables) != 1:
                raise UserError(
                    f"{self.source}: bisect.{what}: the plan has {len(tables)}; "
                    f"name one of {', '.join(tables)}"
                )
            return str(next(iter(tables)))
        if named not in tables:
            raise UserError(
                f"{self.source}: bisect.{what}: {named!r} is not one; the plan's: {', '.join(tables)}"
            )
        return named

    def stack_of(
        self, label: str, *, checkout: str | None = None, set_values: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The bisected stack's table for one variant: its checkout put in, its values set."""
        table = _replaced(self.raw["stacks"][self.stack], CHECKOUT, checkout)  # a copy, in any case
        for path, value in (set_values or {}).items():
            try:
                expansion.set_option(table, path, value, f"bisect.variants.{label}.set", layer_option_names)
            except ValueError as exc:
                raise UserError(f"{self.source}: {exc}") from None
        return expansion.strip(table)

    def comparison(self, reference: tuple[str, dict[str, Any]], candidate: tuple[str, dict[str, Any]]) -> str:
        """The plan text of one comparison: (label, stack table) of each side."""
        plan = {
            key: value for key, value in self.raw.items() if key not in ("stacks", "workloads", "baseline")
        }
        plan["name"] = f"{self.raw.get('name', 'bisect')} bisect"
        plan["baseline"] = reference[0]
        plan["budget"] = self.spec.budget
        plan["threshold"] = self.spec.margin
        if plan.get("reps") == "auto":  # the budget adds the rounds here
            del plan["reps"]
        plan["stacks"] = {reference[0]: reference[1], candidate[0]: candidate[1]}
        plan["workloads"] = {self.workload: self.raw["workloads"][self.workload]}
        return tomli_w.dumps(plan)

    def check_comparison(self, text: str) -> CheckedPlan:
        """A comparison's plan, checked as `run` checks one (relative paths from the plan's)."""
        return parse_plan(text, self.source)


def _replaced(value: Any, old: str, new: str | None) -> Any:
    """A copy of a TOML value with old replaced by new in every string (None: a plain copy)."""
    if isinstance(value, dict):
        return {key: _replaced(item, old, new) for key, item in value.items()}
    if isinstance(value, list):
        return [_replaced(item, old, new) for item in value]
    if isinstance(value, str) and new is not None:
        return value.replace(old, new)
    return value
