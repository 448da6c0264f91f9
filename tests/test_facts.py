"""The run facts registry: what it declares, what it refuses, and who reads it."""

import importlib
import re
import sys
from pathlib import Path

import pytest

from layerbench.analysis import covariates
from layerbench.core import facts
from layerbench.core.facts import Fact, declare
from layerbench.core.runs import RunRecord
from layerbench.observe import settle, tracing
from layerbench.observe.durability import DURABILITY
from layerbench.workloads.stream_write import FILL_BYTES

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


def documented_table() -> list[tuple[str, str, str, str]]:
    text = (REPO / "docs" / "counters.md").read_text()
    section = text.split("## Run facts", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| `(.+?)` \| (.+?) \|$", section, re.MULTILINE)
    return [(key, when, kind, words) for key, when, kind, words in rows]


def test_every_fact_is_in_the_docs_table_as_declared() -> None:
    declared = sorted(_everything().values(), key=lambda f: (facts.WHEN.index(f.when), f.key))
    assert documented_table() == [(f.key, f.when, f.type_name, f.words) for f in declared]


def test_the_same_key_declared_again_differently_is_refused() -> None:
    declare(Fact("test_probe_fact", "during", "a test's", float))
    declare(Fact("test_probe_fact", "during", "a test's", float))  # the same again: fine
    with pytest.raises(ValueError, match="test_probe_fact"):
        declare(Fact("test_probe_fact", "before", "a test's", float))
    with pytest.raises(ValueError, match="test_probe_fact"):
        declare(Fact("test_probe_fact", "during", "a test's", int))


def test_an_undeclared_or_mistyped_fact_fails_the_run_only_when_checking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _everything()
    monkeypatch.setenv(facts.CHECK_VARIABLE, "1")
    facts.check({"settle_waited_s": 0.25, "fill_bytes": 2**30, "durability": None})
    with pytest.raises(RuntimeError, match="nobody_declared_this"):
        facts.check({"settle_waited_s": 0.25, "nobody_declared_this": 1})
    with pytest.raises(RuntimeError, match="fill_bytes"):
        facts.check({"fill_bytes": "half the disk"})
    with pytest.raises(RuntimeError, match="kernel"):
        facts.check({"kernel": {"threads_cpu_s": {"kworker": "busy"}}})
    monkeypatch.delenv(facts.CHECK_VARIABLE)
    facts.check({"nobody_declared_this": 1})  # a plugin's fact outside the tests: stored as it is


def test_a_reader_gets_the_declared_type_back_or_a_clear_refusal() -> None:
    """What the store gives back is JSON: an int where a float was written whole, lists for
    tuples. Reading through the declared fact gives the declared type, and a value of another
    type is refused with its key, never passed on."""
    run = RunRecord(
        0,
        "s",
        "w",
        "ok",
        facts={
            settle.WAITED_S.key: 1,
            settle.TIMED_OUT.key: False,
            tracing.TRACE_BLOCK.key: {"vda": [[0, 1, 7], [1, 2, 3]]},
            DURABILITY.key: {"claimed_bytes": 10, "reached_bytes": 10, "device": "vda", "durable": True},
            FILL_BYTES.key: "lots",
        },
    )
    waited = run.fact(settle.WAITED_S)
    assert waited == 1.0 and isinstance(waited, float)
    assert run.fact(settle.TIMED_OUT) is False
    assert run.fact(settle.BUSY_S) is None  # not stored: None, never 0
    assert run.fact(tracing.TRACE_BLOCK) == {"vda": [(0, 1, 7), (1, 2, 3)]}
    durability = run.fact(DURABILITY)
    assert durability is not None and durability["durable"] and "dirty_bytes" not in durability
    with pytest.raises(ValueError, match="fill_bytes"):
        run.fact(FILL_BYTES)


def test_the_reports_covariates_are_read_before_the_run() -> None:
    """A figure read during the run is an outcome: explaining the run by it would explain the
    run by itself."""
    registered = _everything()
    assert covariates.COVARIATES
    for covariate in covariates.COVARIATES:
        assert registered[covariate.fact.key] == covariate.fact, covariate.fact
        assert covariate.fact.when == "before", covariate.fact


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
        declared = registered.get(factor.fact.key, factor.fact)  # the script's own mark is not stored
        assert factor.when == declared.when in ("before", "during"), factor
