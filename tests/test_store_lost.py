"""A store that goes away while an experiment writes to it: the error is StoreLost (one line,
exit status 1), every run stored before stays whole, and the experiment is marked once the
store is back."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import TEST_ROOT
from sqlalchemy import text

from layerbench.executors.fake import FakeExecutor
from layerbench.experiment import Experiment
from layerbench.plan import parse_plan
from layerbench.plan.schedule import Trial
from layerbench.store import Store, StoreLost

PLAN = """
name = "lost"
reps = 5
warmup = 0
seed = 1
rerun_disturbed = 0
[stacks.a]
layers = [{ kind = "tmpfs", size = "16M" }]
[workloads.w]
kind = "command"
run = "true"
"""
STOPPED_IN_TRIAL = 2


@pytest.fixture
def own_cluster() -> Iterator[Any]:
    """A cluster of this test's own: the test stops its server."""
    import postgres

    if reason := postgres.missing():
        pytest.skip(reason)
    TEST_ROOT.mkdir(parents=True, exist_ok=True)
    with postgres.cluster(TEST_ROOT) as server:
        yield server


def test_a_server_stopped_mid_experiment_is_store_lost_and_the_stored_runs_stay_whole(
    own_cluster: Any,
) -> None:
    url = own_cluster.create_database("lost")
    store = Store(url)

    def script(trial: Trial) -> dict[str, Any]:
        if trial.index == STOPPED_IN_TRIAL:
            own_cluster.stop()  # while the trial runs: its run can no longer be stored
        return {"wall_s": 1.0, "samples": [{"t_s": 0.1 * i, "dt_s": 0.1} for i in range(3)]}

    experiment = Experiment(parse_plan(PLAN, "lost.toml"), store, FakeExecutor(script))
    experiment.prepare([])
    with pytest.raises(StoreLost) as raised:
        experiment.run()
    message = str(raised.value)
    assert raised.value.exit_status == 1 and "\n" not in message
    assert message.startswith(f"results database {store.location}: went away (")
    store.close()

    own_cluster.restart()
    store = Store(url)
    assert experiment.id is not None
    assert [run.trial for run in store.runs(experiment.id)] == list(range(STOPPED_IN_TRIAL))
    assert all(len(series) == 3 for series in store.samples(experiment.id).values())
    # Its process is alive, so nothing marks it yet; once the process is gone, the next
    # run or clean marks it, and says why.
    assert store.experiment(experiment.id).status == "running"
    with store.engine.begin() as connection:
        connection.execute(text("UPDATE experiments SET pid = 2147483647"))
    assert store.mark_running_interrupted() == [experiment.id]
    record = store.experiment(experiment.id)
    assert record.status == "interrupted"
    assert record.status_reason == "its process (pid 2147483647) ended while it ran"
    store.close()


def test_a_store_lost_on_the_way_out_does_not_hide_the_error_that_ended_the_run(tmp_path: Path) -> None:
    """Ending on an error, the mark that fails too is left to the next run or clean."""

    class GoneAfterTheFirstRun(Store):
        runs_stored = 0

        def add_run(self, experiment_id: int, result: Any) -> None:
            if self.runs_stored:
                raise StoreLost(self.location, "server closed the connection unexpectedly")
            super().add_run(experiment_id, result)
            self.runs_stored += 1

        def finish_experiment(self, experiment_id: int, status: str, reason: str | None = None) -> None:
            raise StoreLost(self.location, "connection refused")

    store = GoneAfterTheFirstRun(tmp_path / "r.db")
    experiment = Experiment(parse_plan(PLAN, "lost.toml"), store, FakeExecutor(lambda trial: {"wall_s": 1.0}))
    experiment.prepare([])
    with pytest.raises(StoreLost, match="server closed the connection unexpectedly"):
        experiment.run()
    assert experiment.id is not None and store.run_count(experiment.id) == 1


def test_a_store_lost_when_the_run_is_done_is_the_error(tmp_path: Path) -> None:
    class GoneAtTheEnd(Store):
        def finish_experiment(self, experiment_id: int, status: str, reason: str | None = None) -> None:
            raise StoreLost(self.location, "connection refused")

    store = GoneAtTheEnd(tmp_path / "r.db")
    experiment = Experiment(parse_plan(PLAN, "lost.toml"), store, FakeExecutor(lambda trial: {"wall_s": 1.0}))
    experiment.prepare([])
    with pytest.raises(StoreLost, match="connection refused"):
        experiment.run()
