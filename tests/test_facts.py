"""The run facts registry: what it declares, what it refuses, and who reads it."""

import importlib
import re
import sys
from pathlib import Path

import pytest

from layerbench.analysis import covariates
from layerbench.core import facts
from layerbench.core.facts import Fact, declare

REPO = Path(__file__).resolve().parent.parent


def _everything() -> dict[str, Fact]:
    """Every fact of the package: its producers imported, every layer and workload kind loaded."""
    for producer in ("layerbench.executors.local", "layerbench.fleet.executor", "layerbench.guest.machine"):
        importlib.import_module(producer)
    from layerbench.stacks.base import load_kinds as layer_kinds
    from layerbench.workloads.base import load_kinds as workload_kinds

    layer_kinds()
    workload_kinds()
    return facts.registered()


def documented_table() -> list[tuple[str, str, str]]:
    text = (REPO / "docs" / "counters.md").read_text()
    section = text.split("## Run facts", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| (.+?) \|$", section, re.MULTILINE)
    return [(key, when, words) for key, when, words in rows]


def test_every_fact_is_in_the_docs_table_as_declared() -> None:
    declared = sorted(
        ((f.key, f.when, f.words) for f in _everything().values()),
        key=lambda row: (facts.WHEN.index(row[1]), row[0]),  # type: ignore[arg-type]
    )
    assert documented_table() == declared


def test_the_same_key_declared_again_differently_is_refused() -> None:
    declare(Fact("test_probe_fact", "during", "a test's"))
    declare(Fact("test_probe_fact", "during", "a test's"))  # the same again: fine
    with pytest.raises(ValueError, match="test_probe_fact"):
        declare(Fact("test_probe_fact", "before", "a test's"))


def test_an_undeclared_fact_fails_the_run_only_when_checking(monkeypatch: pytest.MonkeyPatch) -> None:
    _everything()
    monkeypatch.setenv(facts.CHECK_VARIABLE, "1")
    facts.check(["settle_waited_s", "fill_bytes"])
    with pytest.raises(RuntimeError, match="nobody_declared_this"):
        facts.check(["settle_waited_s", "nobody_declared_this"])
    monkeypatch.delenv(facts.CHECK_VARIABLE)
    facts.check(["nobody_declared_this"])  # a plugin's fact outside the tests: stored as it is


def test_the_reports_covariates_are_read_before_the_run() -> None:
    """A figure read during the run is an outcome: explaining the run by it would explain the
    run by itself."""
    registered = _everything()
    assert covariates.COVARIATES
    for covariate in covariates.COVARIATES:
        assert registered[covariate.fact].when == "before", covariate.fact


def test_the_noise_budget_never_takes_a_figure_known_only_after_the_run() -> None:
    """Its factors of facts take before/during from the registry; none is an after-the-run one."""
    registered = _everything()
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import noise_budget
    finally:
        sys.path.remove(str(REPO / "bench"))
    of_facts = [factor for factor in noise_budget.FACTORS if factor.fact is not None]
    assert len(of_facts) >= 10
    for factor in of_facts:
        assert factor.when == registered[factor.fact].when in ("before", "during"), factor
