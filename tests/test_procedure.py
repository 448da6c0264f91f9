"""The trial procedure on a built stack (executors/procedure.py), the same on the host and
in a guest: what the workload says after the run reaches the result, whoever timed it."""

import contextlib
from pathlib import Path

from layerbench.executors import procedure
from layerbench.guest.protocol import GuestAnswer
from layerbench.observe import measure
from layerbench.observe.run_result import RunResult
from layerbench.stacks.base import BuildContext, BuiltStack, Exposed
from layerbench.workloads.base import Prepared, Workload, WorkloadOptions


class _Job(Workload[WorkloadOptions]):
    """A fio-like workload: after its run it reports registry metrics, a failure, and bytes
    it claims durable."""

    kind = "test-job"

    def prepare(self, ctx: BuildContext, stack: BuiltStack, resources: contextlib.ExitStack) -> Prepared:
        def after(done: Prepared) -> None:
            done.metrics |= {"read_iops": 1234.0, "not_a_metric": 1.0}
            done.failure = "fio job j: No space left on device"
            done.durable_bytes = 4096
            done.facts["fio_jobs"] = [{"name": "j"}]

        return Prepared(
            argv=["true"], cwd=stack.top, drop_caches=False, after_run=after, units=8.0, unit="bytes"
        )


def _run(tmp_path: Path, counters: measure.RunCounters) -> tuple[RunResult, list[str]]:
    laps: list[str] = []
    stack = BuiltStack(tmp_path, [Exposed(tmp_path, run_facts=[lambda: {"peak_memory": 7}])])
    ctx = BuildContext(scratch=None, workdir=tmp_path)  # type: ignore[arg-type]
    with contextlib.ExitStack() as resources:
        result = procedure.run_on_top(
            _Job(WorkloadOptions(kind="test-job"), "j"),
            ctx,
            stack,
            resources,
            lambda p: counters,
            laps.append,
        )
    return result, laps


def test_the_workloads_own_figures_reach_the_result(tmp_path: Path) -> None:
    ok = measure.failed("unused")
    ok = measure.RunCounters(**{**ok.as_row(), "status": "ok", "error": None, "wall_s": 1.0})
    result, laps = _run(tmp_path, ok)
    assert laps == ["prepare", "run"]
    assert result.metrics == {"read_iops": 1234.0}  # only the registry's reported metrics
    assert result.durable_bytes == 4096 and (result.units, result.unit) == (8.0, "bytes")
    assert result.facts["fio_jobs"] == [{"name": "j"}] and result.facts["peak_memory"] == 7
    assert result.counters.error is None


def test_a_failed_run_carries_what_only_the_workload_knows(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, measure.failed("exit status 1"))
    assert result.counters.error == "exit status 1; fio job j: No space left on device"


def test_a_guest_answer_carries_the_whole_result_through_json(tmp_path: Path) -> None:
    result, _ = _run(tmp_path, measure.failed("exit status 1"))
    answer = GuestAnswer(result=result, phases={"prepared_s": 1.5}, devices=["vda"])
    back = GuestAnswer.model_validate_json(answer.model_dump_json())
    assert back.result == result and isinstance(back.result.counters, measure.RunCounters)


def test_a_layers_step_before_the_run_comes_after_the_prepare_and_before_the_timing(tmp_path: Path) -> None:
    """lvm-thin's snapshot: taken once the workload has written what it prepares, before the
    run is timed; its facts are the run's."""
    order: list[str] = []

    def snapshot() -> dict[str, object]:
        order.append("before_run")
        return {"thin_snapshot": "vg/snapshot of vg/volume"}

    def timed(prepared: Prepared) -> measure.RunCounters:
        order.append("timed")
        return measure.failed("unused")

    stack = BuiltStack(tmp_path, [Exposed(tmp_path, before_run=[snapshot])])
    ctx = BuildContext(scratch=None, workdir=tmp_path)  # type: ignore[arg-type]
    with contextlib.ExitStack() as resources:
        result = procedure.run_on_top(
            _Job(WorkloadOptions(kind="test-job"), "j"), ctx, stack, resources, timed, order.append
        )
    assert order == ["prepare", "before_run", "timed", "run"]
    assert result.facts["thin_snapshot"] == "vg/snapshot of vg/volume"
