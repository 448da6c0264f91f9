"""The "why" rules on recorded counter sets: the FreeBSD report's own numbers, and runs
of this machine (zlib built in a chroot through bindfs vs the plain disk)."""

from dataclasses import replace
from typing import Any

from layerbench import stats
from layerbench.analysis import explain
from layerbench.core.runs import RunRecord

KEYS = ("wall_s", "user_s", "sys_s", "cpu_pct", "majflt", "minflt", "nvcsw", "nivcsw", "inblock", "oublock")


def _runs(stack: str, rows: list[tuple[float, ...]], helper: float = 0.0) -> list[RunRecord]:
    runs = []
    for row in rows:
        run: dict[str, Any] = dict(zip(KEYS, row, strict=True))
        run.update(stack=stack, workload="build", status="ok", helper_cpu_s=helper)
        run.update(maxrss_kb=2800, read_bytes=0, write_bytes=0, throughput=None)
        runs.append(RunRecord.from_row(run))
    return runs


def _why(runs: list[RunRecord], stack: str) -> explain.Why | None:
    rows = stats.summaries(runs, "base", ["base", stack], ["build"])
    return explain.why(rows, "base", stack, "build")


# The seed's csh `time` lines (base, nullfs), each repeated with the small spread five
# runs of one build show: 174.084u 33.281s 3:37.30 95.4% ... 252pf and
# 176.257u 38.316s 6:04.13 58.9% ... 76805pf.
SEED_BASE = [
    (217.30 + d, 174.08 + d, 33.28, 95.4 - d / 10, 252 + d, 9e5, 4000 + d, 800, 329, 358)
    for d in (-1.2, -0.4, 0.0, 0.5, 1.1)
]
SEED_NULLFS = [
    (364.13 + d, 176.26 + d, 38.32 + d / 5, 58.9 + d / 10, 76805 + 10 * d, 9e5, 160000 + d, 900, 183, 366)
    for d in (-2.0, -0.8, 0.0, 0.7, 1.9)
]


def test_the_seeds_numbers_read_as_waiting_and_cache_misses() -> None:
    result = _why(_runs("base", SEED_BASE) + _runs("nullfs", SEED_NULLFS), "nullfs")
    assert result is not None
    line = result.line()
    assert line.startswith("nullfs: elapsed x1.68 [")
    assert "CPU 95.4% -> 58.9%: waiting, not computing (I/O or locks)" in line
    assert "major page faults x305" in line
    assert "voluntary context switches x40.0" in line
    assert "pages of programs and mapped files read back in" in line
    assert "round trips to a daemon or device" in line
    # user time rose 1 %: significant, but not a mover.
    assert "user time" not in line
    assert [m.metric for m in result.moved][:2] == ["majflt", "nvcsw"]


def test_no_line_without_a_significant_elapsed_difference() -> None:
    same = _runs("base", SEED_BASE) + _runs("bind", [(r[0] + 0.3, *r[1:]) for r in SEED_BASE])
    assert _why(same, "bind") is None
    # The baseline itself never gets a line.
    rows = stats.summaries(_runs("base", SEED_BASE), "base", ["base"], ["build"])
    assert explain.why(rows, "base", "base", "build") is None


def test_counters_rising_from_zero_and_kernel_work() -> None:
    base = [(10.0 + d, 9.0, 1.0 + d / 10, 99.0, 0, 5000, 100, 50, 0, 10) for d in (0, 0.1, 0.2, 0.3)]
    slow = [(14.0 + d, 9.0, 4.0 + d / 10, 93.0, 40 + d, 5000, 100, 50, 0, 10) for d in (0, 0.1, 0.2, 0.3)]
    result = _why(_runs("base", base) + _runs("img", slow), "img")
    assert result is not None
    line = result.line()
    assert "major page faults 0 -> 40" in line
    assert "system time x3.96 [" in line and "kernel work" in line
    # CPU % fell by 6 %: significant but below the threshold, so no "waiting" reading.
    assert "CPU" not in line.split(";")[1]


def test_helper_cpu_and_the_faster_direction() -> None:
    base = [(10.0 + d, 5.0, 1.0, 60.0, 3, 5000, 100, 50, 0, 10) for d in (0, 0.1, 0.2, 0.3)]
    fast = [(5.0 + d, 5.0, 1.0, 95.0 + d, 3, 5000, 100, 50, 0, 10) for d in (0, 0.1, 0.2, 0.3)]
    result = _why(_runs("base", base) + _runs("cached", fast, helper=0.4), "cached")
    assert result is not None
    assert result.elapsed.verdict == "faster"
    line = result.line()
    assert "CPU 60.0% -> 95.2%: busier CPU (less waiting)" in line
    assert "helper processes 0.40s CPU outside the workload's counters" in line


def test_nothing_moved_says_so() -> None:
    base = [(10.0 + d, 5.0 + d, 1.0, 60.0, 3, 5000, 100, 50, 0, 10) for d in (0, 0.1, 0.2, 0.3)]
    slow = [(11.0 + d, 5.0 + d, 1.0, 60.0, 3, 5000, 100, 50, 0, 10) for d in (0, 0.1, 0.2, 0.3)]
    result = _why(_runs("base", base) + _runs("x", slow), "x")
    assert result is not None
    assert result.line().endswith("; no counter explains it")


def test_a_counter_falling_to_zero_reads_as_such() -> None:
    base = [(1.0 + d, 0.1, 0.3, 40.0, 0, 250, 150, 5, 10000 + d, 17000) for d in (0, 0.1, 0.2, 0.3)]
    fast = [(0.3 + d, 0.1, 0.05, 25.0, 0, 250, 100, 2, 0, 15000) for d in (0, 0.01, 0.02, 0.03)]
    result = _why(_runs("base", base) + _runs("vnode", fast), "vnode")
    assert result is not None and result.elapsed.verdict == "faster"
    assert "block input 10,000 -> 0" in result.line()


def test_a_faster_stack_is_read_by_what_fell() -> None:
    # The default experiment's image extract: faster, CPU % down because system time halved.
    base = [(1.0 + d, 0.2, 0.48 + d / 10, 67.6 + d, 0, 250, 150, 5, 9500, 17000) for d in (0, 0.1, 0.2, 0.3)]
    fast = [(0.62 + d, 0.2, 0.22 + d / 10, 49.6 + d, 0, 250, 150, 5, 9500, 17000) for d in (0, 0.1, 0.2, 0.3)]
    result = _why(_runs("base", base) + _runs("image", fast), "image")
    assert result is not None and result.elapsed.verdict == "faster"
    line = result.line()
    assert "CPU 67.8% -> 49.8%: CPU time fell even more than elapsed" in line
    assert "waiting" not in line
    assert line.endswith("so: less kernel work")


def test_a_counter_moving_against_the_difference_gives_no_reading() -> None:
    # Slower, yet system time fell: listed as a mover, but it does not explain the slowdown.
    base = [(10.0 + d, 5.0, 2.0 + d / 10, 70.0, 3, 5000, 100, 50, 0, 10) for d in (0, 0.1, 0.2, 0.3)]
    slow = [(14.0 + d, 5.0, 1.0 + d / 10, 43.0, 3, 5000, 100, 50, 0, 10) for d in (0, 0.1, 0.2, 0.3)]
    result = _why(_runs("base", base) + _runs("x", slow), "x")
    assert result is not None
    line = result.line()
    assert "system time x0." in line
    assert "kernel work" not in line


def test_a_cpu_time_too_small_to_matter_explains_nothing() -> None:
    # This machine's extract through bindfs: user time rose from 0.026 s to 0.046 s while
    # the elapsed time rose by 1.6 s; the round trips explain it, the user time does not.
    base = [
        (1.14 + d, 0.026 + d / 100, 0.72, 65.6, 10, 250, 900, 5, 7548, 228380) for d in (0, 0.1, 0.2, 0.3)
    ]
    fuse = [
        (2.79 + d, 0.046 + d / 100, 0.80, 30.0, 10, 250, 90000, 5, 6632, 208895) for d in (0, 0.1, 0.2, 0.3)
    ]
    result = _why(_runs("base", base) + _runs("fuse", fuse, helper=1.8), "fuse")
    assert result is not None
    line = result.line()
    assert "user time" not in line and "computing in the workload" not in line
    assert "voluntary context switches x100" in line and "round trips to a daemon or device" in line


def test_a_stack_given_fewer_rounds_is_read_against_the_baselines_runs_beside_it() -> None:
    """A budget gives undecided stacks more rounds: here the baseline ran 10 repetitions and
    drifted (system time 1 s, then 3 s), the stack only the first 5 (system time 2 s). Its
    difference is taken from the baseline's runs of those 5 repetitions, the ones its paired
    ratio uses: 1 s -> 2 s, not the median of all ten (about 2 s: "no change")."""
    jitter = (0, 0.01, 0.02, 0.03, 0.04)
    early = [(10.0 + d, 5.0, 1.0 + d, 60.0, 3, 5000, 100, 50, 0, 10) for d in jitter]
    late = [(16.0 + d, 5.0, 3.0 + d, 60.0, 3, 5000, 100, 50, 0, 10) for d in jitter]
    mine = [(14.0 + d, 5.0, 2.0 + d / 2, 60.0, 3, 5000, 100, 50, 0, 10) for d in jitter]
    runs = [replace(run, rep=rep) for rep, run in enumerate(_runs("base", early + late))]
    runs += [replace(run, rep=rep) for rep, run in enumerate(_runs("img", mine))]
    rows = stats.summaries(runs, "base", ["base", "img"], ["build"], paired=True)
    result = explain.why(rows, "base", "img", "build")
    assert result is not None and result.elapsed.paired
    (system,) = [m for m in result.moved if m.metric == "sys_s"]
    assert system.base == 1.02 and system.value == 2.01  # the medians over repetitions 0-4
    assert "system time x1.97 [" in result.line()


def test_a_helper_both_sides_have_takes_over_nothing() -> None:
    """Two builds of one FUSE daemon, the second sleeping before each write: the slower side's
    CPU share falls and its daemon used 0.35 s of CPU, as the baseline's did; the time went to
    waiting, not to the daemon's work."""
    base = [(0.45 + d, 0.05, 0.10, 30.0, 10, 250, 9000, 5, 100, 1000) for d in (0, 0.02, 0.04, 0.06)]
    slow = [(2.60 + d, 0.05, 0.10, 1.8, 10, 250, 9000, 5, 100, 1000) for d in (0, 0.02, 0.04, 0.06)]
    for helper_of_base, reading in ((0.35, "waiting, not computing"), (0.0, "work moved to a helper daemon")):
        result = _why(_runs("base", base, helper=helper_of_base) + _runs("slow", slow, helper=0.35), "slow")
        assert result is not None and reading in result.line(), result.line()
