"""The run facts registry: every key a trial may store in its run's `facts`, when it was read
against the timed run, and what it says.

The metrics registry names what a run measures in columns; facts are the rest a trial knows
(how long its stack took to build, what the settle wait saw, a fio job's latency bins, a
guest's boot time). Each module that writes a fact declares it where it writes it, with
`declare()`, at import: a layer or workload kind's facts come with its own file. Readers
look a key up here instead of trusting a string: the reports' covariates and the noise
budget take only facts read before the clock started as pre-run covariates (a figure read
during the run is an outcome of it), the docs' table of facts is checked against this
registry, and the end-to-end tests check that every fact a run stored is declared.
"""

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

# before: set or read before the timed run's clock starts (the stack, the workload's setup, the
#         settle wait, the memory right before): it may explain the run, as a pre-run covariate
# during: read over the timed run: an outcome of it, never a covariate
# after:  known once the run ended (the teardown, whether its data reached the disk)
When = Literal["before", "during", "after"]
WHEN: tuple[When, ...] = ("before", "during", "after")


@dataclass(frozen=True)
class Fact:
    key: str
    when: When
    words: str  # what it says, for the docs


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


def check(keys: Iterable[str]) -> None:
    """With LAYERBENCH_CHECK_FACTS set (the test suite sets it), a run's fact that no module
    declared is a bug: raise. Otherwise a plugin's undeclared fact is stored as it is."""
    if os.environ.get(CHECK_VARIABLE) and (unknown := undeclared(keys)):
        raise RuntimeError(f"run facts not declared in layerbench.core.facts: {', '.join(unknown)}")
