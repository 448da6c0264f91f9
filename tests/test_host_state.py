from helpers import experiment_record

from layerbench.core.runs import RunRecord
from layerbench.reports import host_state


def _run(wall_s: float, status: str = "ok", **facts: float) -> RunRecord:
    return RunRecord(0, "a", "w", status, values={"wall_s": wall_s}, facts=facts)


def test_the_share_of_time_in_timed_runs() -> None:
    experiment = experiment_record(finished="2026-12-02T10:01:40+00:00")
    runs = [_run(30.0), _run(40.0), _run(0.0, "failed"), _run(5.0)]
    line = host_state.time_share_line(experiment, runs)
    # 75 s of 100 s in the three runs that ran; 25 s over 4 trials outside them.
    assert line == (
        "time in timed runs: 75 s of 100 s (75 %); the rest is 6.25 s per trial of building, "
        "preparing, settling and tearing down"
    )


def test_no_share_while_the_experiment_runs() -> None:
    assert host_state.time_share_line(experiment_record(finished=None), [_run(1)]) is None


def test_the_untimed_time_per_phase_is_the_mean_over_the_trials_that_recorded_it() -> None:
    experiment = experiment_record(finished="2026-12-02T10:00:20+00:00")
    runs = [
        _run(4.0, phase_build_s=1.0, phase_prepare_s=2.0, phase_teardown_s=0.5),
        _run(6.0, phase_build_s=3.0, phase_around_run_s=0.25),
    ]
    line = host_state.time_share_line(experiment, runs)
    assert line == (
        "time in timed runs: 10 s of 20 s (50 %); the rest is 5.00 s per trial: building the stack "
        "2.00 s, preparing the workload 2.00 s, around the run (caches, settling, counters) 0.25 s, "
        "tearing down 0.50 s (means)"
    )
