"""A new layer kind and a new workload kind, defined here and registered like the real
ones, go through list, check, doctor, an experiment (FakeExecutor) and every report
format without any other file changing."""

import contextlib
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from layerbench import cli, reports
from layerbench.core.sizes import parse_size
from layerbench.executors.fake import FakeExecutor
from layerbench.experiment import Experiment
from layerbench.plan import load_plan
from layerbench.plan.schedule import Trial
from layerbench.selftest import doctor
from layerbench.stacks.base import LAYER_KINDS, BuildContext, Exposed, Layer, LayerOptions, Placement
from layerbench.stacks.base import register as register_layer
from layerbench.store import Store
from layerbench.workloads.base import WORKLOAD_KINDS, Prepared, Workload, WorkloadOptions
from layerbench.workloads.base import register as register_workload


class ScratchpadOptions(LayerOptions):
    reserve: str = "3G"


class ScratchpadLayer(Layer[ScratchpadOptions]):
    """A layer that reserves disk space of its own (think: a preallocated image)."""

    kind = "test-scratchpad"
    Options = ScratchpadOptions
    summary = "a test layer that reserves disk space"
    tools = ("sh",)

    def place(self, below: Placement) -> Placement:
        reserve = parse_size(self.options.reserve)
        return replace(below, reserved_disk=below.reserved_disk + reserve)

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        yield below


class ChecksumOptions(WorkloadOptions):
    size: str = "1G"


class Checksum(Workload[ChecksumOptions]):
    """A workload that writes its size of data (so the plan's disk need counts it)."""

    kind = "test-checksum"
    Options = ChecksumOptions
    summary = "a test workload"
    tools = ("sh",)
    writes = True

    def data_bytes(self, capacity: int | None, reference: int | None) -> int:
        return parse_size(self.options.size)

    def prepare(self, ctx: BuildContext, stack: object, resources: contextlib.ExitStack) -> Prepared:
        return Prepared(argv=["true"], cwd=Path("/"), units=1, unit="files")


PLAN = """
name = "plugins"
reps = 6
warmup = 1
seed = 4
baseline = "plain"
[stacks.plain]
layers = []
[stacks.pad]
layers = [{ kind = "test-scratchpad", reserve = "5G" }]
[workloads.sum]
kind = "test-checksum"
size = "2G"
[workloads.files]
kind = "metadata"
files = 100
"""


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    """Registered as the real kinds are (by their decorator), for these tests only."""
    register_layer(ScratchpadLayer)
    register_workload(Checksum)
    yield
    del LAYER_KINDS[ScratchpadLayer.kind], WORKLOAD_KINDS[Checksum.kind]


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plugins.toml"
    path.write_text(PLAN)
    return path


def test_list_check_and_doctor_know_the_new_kinds(
    plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["list"]) == 0
    listed = capsys.readouterr().out
    assert "test-scratchpad" in listed and "test-checksum" in listed
    assert cli.main(["check", str(plan_file), "--scratch", str(tmp_path / "scratch")]) == 0
    assert "2 stacks x 2 workloads x (1 warm-up + 6 measured) = 28 trials" in capsys.readouterr().out
    plan = load_plan(str(plan_file))
    # One trial at a time: the pad's 5G reserve plus the workload's 2G, on the disk.
    assert doctor.plan_needs_bytes(plan) == 7 * 2**30
    space = doctor.check_space(tmp_path, plan)
    assert "needs up to 7G" in space.detail


def _script(trial: Trial) -> dict[str, float]:
    slower = 1.5 if trial.stack == "pad" else 1.0
    return {"wall_s": slower * (1 + 0.01 * (trial.rep % 3)), "user_s": 0.1, "sys_s": 0.2, "cpu_pct": 30.0}


def test_a_fake_experiment_runs_through_store_statistics_and_every_format(
    plan_file: Path, tmp_path: Path
) -> None:
    store = Store(tmp_path / "r.db")
    executor = FakeExecutor(_script)
    experiment = Experiment(load_plan(str(plan_file)), store, executor)
    experiment.prepare([])
    experiment.run()
    assert len(executor.trials) == 28 and [t.index for t in executor.trials] == list(range(28))
    data = reports.gather(store, 1)
    row = data.summary("pad", "sum", "wall_s")
    assert row is not None and row.decision == "slower" and row.ratio == pytest.approx(1.5)
    assert data.experiment.stacks["pad"].layers == ["test-scratchpad(reserve=5G)"]
    for name in reports.load_formats():
        document = reports.render(data, name)
        assert "pad" in document, name
        if name == "json":
            assert json.loads(document)["summary"]
        if name in ("text", "markdown", "mail", "html"):
            assert "slower" in document, name
