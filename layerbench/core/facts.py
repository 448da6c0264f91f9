"""The run facts registry: every key a trial may store in its run's `facts`, when it was read
against the timed run, what it says, and the type of its value.

The metrics registry names what a run measures in columns; facts are the rest a trial knows
(how long its stack took to build, what the settle wait saw, a fio job's latency bins, a
guest's boot time). Each module that writes a fact declares it where it writes it, as a
named `Fact` passed to `declare()` at import: a layer or workload kind's facts come with its
own file. Readers name the declared fact, never a string, and get its type back
(`run.fact(settle.WAITED_S)`: a float or None); the reports' covariates and the noise budget
take only facts read before the clock started as pre-run covariates (a figure read during the
run is an outcome of it), the docs' table of facts is checked against this registry, and the
tests check that every fact a run stored is declared and of its declared type.

An experiment's own facts (the budget's looks, its stored rows: stats.sequential, adaptive)
are `Fact`s too, read the same way, but not declared here: this registry is the runs'.
"""

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, Literal, TypeVar

from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypeAliasType  # a recursive alias pydantic can build a schema of

# What a fact holds once stored: the store keeps facts as JSON.
JSON = TypeAliasType("JSON", "str | int | float | bool | list[JSON] | dict[str, JSON] | None")
T = TypeVar("T", covariant=True)

# before: set or read before the timed run's clock starts (the stack, the workload's setup, the
#         settle wait, the memory right before): it may explain the run, as a pre-run covariate
# during: read over the timed run: an outcome of it, never a covariate
# after:  known once the run ended (the teardown, whether its data reached the disk)
When = Literal["before", "during", "after"]
WHEN: tuple[When, ...] = ("before", "during", "after")


@dataclass(frozen=True)
class Fact(Generic[T]):
    """One fact a run may store: its key, when it was read, what it says, and the type of its
    value (a Python type, a generic alias such as `dict[str, float]`, or a TypedDict): a
    reader gets that type back, checked (`RunRecord.fact(FACT)`), never a bare JSON value."""

    key: str
    when: When
    words: str  # what it says, for the docs
    kind: type[T]

    @cached_property
    def _adapter(self) -> TypeAdapter[T]:
        return TypeAdapter(self.kind)

    def read(self, facts: Mapping[str, object]) -> T | None:
        """This fact's value in a run's facts (None: the run has none); a stored value of
        another type is refused with the key named."""
        found = facts.get(self.key)
        if found is None:
            return None
        try:
            return self._adapter.validate_python(found)
        except ValidationError as error:
            raise ValueError(
                f"run fact {self.key!r} holds {found!r}, not {self.type_name}: {error}"
            ) from None

    @property
    def type_name(self) -> str:
        """The value's type as the docs write it."""
        kind: Any = self.kind
        if not isinstance(kind, type):  # a generic alias: list[int], dict[str, float] ...
            return str(kind).replace("typing.", "").replace("layerbench.", "")
        if kind.__module__ == "builtins":
            return kind.__name__
        return f"{kind.__module__.removeprefix('layerbench.')}.{kind.__name__}"


_REGISTRY: dict[str, Fact] = {}
CHECK_VARIABLE = "LAYERBENCH_CHECK_FACTS"


def declare(*facts: Fact) -> tuple[Fact, ...]:
    """Register facts (a module's, at import); the same key declared twice must say the same."""
    for fact in facts:
        known = _REGISTRY.setdefault(fact.key, fact)
        if known != fact:
            raise ValueError(f"run fact {fact.key!r} is declared twice, differently: {known} and {fact}")
    return facts


def registered() -> dict[str, Fact]:
    """Every fact declared by the modules imported so far, by key."""
    return dict(_REGISTRY)


def undeclared(keys: Iterable[str]) -> list[str]:
    return sorted(key for key in set(keys) if key not in _REGISTRY)


def check(facts: Mapping[str, object]) -> None:
    """With LAYERBENCH_CHECK_FACTS set (the test suite sets it), a run's fact that no module
    declared, or whose value is not of its declared type, is a bug: raise. Otherwise a
    plugin's undeclared fact is stored as it is."""
    if not os.environ.get(CHECK_VARIABLE):
        return
    facts = json.loads(json.dumps(facts, default=str))  # as a reader will get them back
    if unknown := undeclared(facts):
        raise RuntimeError(f"run facts not declared in layerbench.core.facts: {', '.join(unknown)}")
    for key in facts:
        try:
            _REGISTRY[key].read(facts)
        except ValueError as error:
            raise RuntimeError(f"run fact of the wrong type: {error}") from None
