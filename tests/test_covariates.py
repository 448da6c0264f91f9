import random

import pytest

from layerbench.analysis import covariates
from layerbench.core.runs import RunRecord


def _runs(times: list[float], reported: list[float | None], stack: str = "tmpfs") -> list[RunRecord]:
    return [
        RunRecord(
            0,
            stack,
            "stream-write",
            "ok",
            values={"wall_s": wall},
            facts={"memory_reported_kib_before_run": kib},
        )
        for wall, kib in zip(times, reported, strict=True)
    ]


def test_a_noisy_cell_whose_times_follow_the_memory_handed_back_is_named_with_the_figures() -> None:
    reported = [0.0, 200_000, 400_000, 800_000, 1_200_000, 1_600_000, 2_000_000]
    times = [0.55, 0.64, 1.2, 1.99, 2.4, 3.0, 3.53]
    [note] = covariates.notes(_runs(times, reported))
    assert note.startswith("tmpfs/stream-write: its runs took longer the more free memory handed back")
    assert "Spearman rho +1.00" in note and "7 runs" in note and "0 to 1953 MiB" in note


def test_no_note_without_an_association_or_without_noise() -> None:
    rng = random.Random(7)
    reported: list[float | None] = [rng.randrange(0, 2_000_000) for _ in range(8)]
    unrelated = [rng.uniform(0.5, 3.5) for _ in range(8)]
    assert covariates.notes(_runs(unrelated, reported)) == []  # noisy, but not with the covariate
    quiet = [1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06]  # follows the covariate, but CV ~2 %
    assert covariates.notes(_runs(quiet, [0, 1, 2, 3, 4, 5, 6])) == []


def test_runs_without_the_figure_or_too_few_are_left_alone() -> None:
    assert covariates.notes(_runs([1.0, 2.0, 3.0, 4.0, 5.0], [None] * 5)) == []
    assert covariates.notes(_runs([1.0, 2.0, 3.0, 4.0], [1, 2, 3, 4])) == []


def test_runs_whose_inode_group_a_trial_just_emptied_are_named_and_a_null_counts_as_long_ago() -> None:
    """Null: no trial ended near the group in the last 365 s, the far end of the scale."""
    freed = [None, None, 300.0, 120.0, 40.0, 10.0, 2.0]
    times = [0.34, 0.35, 0.36, 0.41, 0.48, 0.55, 0.64]
    runs = [
        RunRecord(
            0, "disk", "metadata", "ok", values={"wall_s": wall}, facts={"inode_group_freed_s_ago": ago}
        )
        for wall, ago in zip(times, freed, strict=True)
    ]
    [note] = covariates.notes(runs)
    assert note.startswith("disk/metadata: its runs took shorter the more seconds since a trial ended near")
    assert "Spearman rho -" in note and "7 runs" in note and "2 to 365 s" in note


def test_runs_that_follow_a_slow_cpu_before_them_are_named_with_the_probe_in_ms() -> None:
    probes = [0.008, 0.009, 0.011, 0.013, 0.016, 0.019, 0.024]
    times = [5.6, 5.9, 6.2, 6.8, 7.1, 7.7, 8.4]
    runs = [
        RunRecord(0, "disk", "metadata", "ok", values={"wall_s": wall}, facts={"cpu_probe_s": probe})
        for wall, probe in zip(times, probes, strict=True)
    ]
    [note] = covariates.notes(runs)
    assert note.startswith("disk/metadata: its runs took longer the more time a fixed loop took")
    assert "Spearman rho +1.00" in note and "8.0 to 24.0 ms" in note


def test_a_few_runs_get_the_exact_p_value_not_the_t_approximation() -> None:
    """Five runs in perfect rank order: 2 of the 120 pairings are as extreme, p = 0.017, not the
    t approximation's 1e-24; above ALPHA, so five such runs name nothing."""
    rho, p_value = covariates.spearman([1, 2, 3, 4, 5], [0.4, 0.5, 0.52, 0.6, 0.7])
    assert rho == pytest.approx(1.0) and p_value == pytest.approx(2 / 120)
    assert covariates.notes(_runs([0.4, 0.8, 1.2, 1.6, 2.0], [1, 2, 3, 4, 5])) == []
    # beyond EXACT_UP_TO runs, scipy's p-value (the exact one is about 2/12!, far below it)
    _, many = covariates.spearman(list(range(12)), [float(v) for v in range(12)])
    assert many < 1e-6
