"""An inconclusive verdict's "about N repetitions would decide it" holds where it is said."""

import numpy as np

from layerbench import stats
from layerbench.selftest import prediction_check
from layerbench.stats import methods


def test_the_prediction_decides_at_least_half_the_time_in_every_bucket() -> None:
    found = prediction_check.decided_at_prediction(trials=60, seed=2)
    assert sum(total for total, _ in found.values()) > 100  # enough inconclusive comparisons drawn
    for (low, high), (total, hits) in found.items():
        if total >= 20:
            assert hits / total >= prediction_check.HOLDS, (low, high, total, hits)


def test_a_prediction_at_the_cap_is_not_said_as_a_number() -> None:
    row = stats.Summary(*("s", "w", "wall_s", 5), *([1.0] * 7), *([None] * 6), "")
    tiny = np.array([0.001, -1.2, 1.2, -1.0, 1.0])  # wide, centred on 1: far from any decision
    stats.decide(row, methods.paired_t(tiny), 0.01, 0.5, stats.Design())
    assert row.decision == "inconclusive" and row.reps_to_decide == stats.MAX_REPS_SUGGESTED
    assert "more than 1,000 repetitions would be needed" in row.verdict
