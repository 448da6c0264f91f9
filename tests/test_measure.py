from pathlib import Path

import pytest

from layerbench.observe import measure


def test_children_are_counted_by_wait4(tmp_path: Path) -> None:
    # The CPU is burnt by a grandchild: wait4 on the child must still count it.
    burn = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"
    counters = measure.run_timed(["sh", "-c", f"sh -c '{burn}'"], cwd=tmp_path)
    assert counters.status == "ok" and counters.exit_code == 0
    assert counters.user_s + counters.sys_s > 0.05
    assert counters.wall_s >= counters.user_s * 0.5
    assert 0 < counters.cpu_pct <= 100 * 2 + 5
    assert counters.minflt > 0 and counters.maxrss_kb > 0


def test_failure_is_recorded_with_stderr(tmp_path: Path) -> None:
    counters = measure.run_timed(
        ["sh", "-c", "echo oh no >&2; exit 3"], cwd=tmp_path, stderr_path=tmp_path / "err"
    )
    assert counters.status == "failed" and counters.exit_code == 3
    assert counters.error == "exit status 3: oh no"


def test_timeout_kills_the_whole_tree(tmp_path: Path) -> None:
    counters = measure.run_timed(["sh", "-c", "sleep 30 & sleep 30; wait"], cwd=tmp_path, timeout=0.3)
    assert counters.status == "failed" and "timed out after 0.3s" in (counters.error or "")
    assert counters.wall_s < 5


def test_missing_program(tmp_path: Path) -> None:
    counters = measure.run_timed(["/nonexistent/prog"], cwd=tmp_path)
    assert counters.status == "failed" and "cannot start" in (counters.error or "")


def test_device_counters_see_a_synced_write(needs_root: None, tmp_path: Path) -> None:
    from layerbench.linux.mounts import devices_under

    devices = devices_under("/var/tmp")
    target = Path("/var/tmp") / f"layerbench-measure-{tmp_path.name}"
    try:
        counters = measure.run_timed(
            ["dd", "if=/dev/zero", f"of={target}", "bs=1M", "count=32", "conv=fsync", "status=none"],
            cwd=tmp_path,
            devices=devices,
        )
    finally:
        target.unlink(missing_ok=True)
    assert counters.status == "ok"
    assert counters.write_bytes >= 32 * 2**20 * 0.9
    assert counters.oublock >= 32 * 2**20 / 512 * 0.9


@pytest.mark.parametrize("seconds", [0.2])
def test_wall_time_is_monotonic_and_close(tmp_path: Path, seconds: float) -> None:
    counters = measure.run_timed(["sleep", str(seconds)], cwd=tmp_path)
    assert seconds <= counters.wall_s < seconds + 0.2
    assert counters.cpu_pct < 20


def test_helper_cpu_counts_every_thread_of_the_helper(tmp_path: Path) -> None:
    """A helper (as a FUSE daemon) burning CPU in two threads, not its main one: its whole
    CPU time across the timed run is recorded, and none of it is the workload's."""
    import subprocess
    import sys

    burn = (
        "import threading, time\n"
        "def spin():\n"
        "    end = time.monotonic() + 30\n"
        "    while time.monotonic() < end: pass\n"
        "for _ in range(2): threading.Thread(target=spin, daemon=True).start()\n"
        "time.sleep(30)\n"
    )
    helper = subprocess.Popen([sys.executable, "-c", burn])
    try:
        counters = measure.run_timed(["sleep", "1"], cwd=tmp_path, helper_pids=[helper.pid])
    finally:
        helper.kill()
        helper.wait()
    assert counters.status == "ok"
    # Two spinning threads on (at most) two shared cores: well above one thread's worth is
    # not guaranteed on a busy machine, but far above zero is.
    assert counters.helper_cpu_s > 0.3, counters.helper_cpu_s
    assert counters.user_s + counters.sys_s < 0.2


def test_a_few_milliseconds_of_helper_work_are_not_read_as_zero(tmp_path: Path) -> None:
    """A helper that works about 3 ms during the run (less than one 10 ms clock tick, the
    unit of /proc/PID/stat) is read in nanoseconds: above zero, and close to what the
    kernel's schedstat says the helper's threads ran."""
    import subprocess
    import sys

    from layerbench.linux import procfs

    work = (
        "import sys, time\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "time.sleep(0.1)\n"  # the run's counters are read by now: the burst is inside the run
        "end = time.thread_time() + 0.003\n"
        "while time.thread_time() < end: pass\n"
        "sys.stdin.readline()\n"
    )
    helper = subprocess.Popen(
        [sys.executable, "-c", work], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert helper.stdin is not None and helper.stdout is not None
    try:
        assert helper.stdout.readline() == "ready\n"  # its start-up is over before the run
        helper.stdin.write("go\n")
        helper.stdin.flush()
        counters = measure.run_timed(["sleep", "0.3"], cwd=tmp_path, helper_pids=[helper.pid])
        ran_ns = procfs.cpu_ns(helper.pid)
    finally:
        helper.stdin.write("done\n")
        helper.stdin.flush()
        helper.wait()
    assert counters.status == "ok"
    # The burst is 3 ms of the thread's own CPU; the helper's whole life (start-up included)
    # bounds what can have fallen inside the run.
    assert 0.0025 <= counters.helper_cpu_s <= ran_ns / 1e9, (counters.helper_cpu_s, ran_ns)


def test_helper_cpu_from_the_group_counts_threads_that_exited(needs_root: None, tmp_path: Path) -> None:
    """A helper whose worker thread burns ~60 ms and exits during the run: its control
    group still counts that thread (cpu.stat), where the live threads' schedstat cannot."""
    import subprocess
    import sys

    from layerbench.linux import cgroups

    tree = cgroups.pressure_hierarchy()
    if tree is None:
        pytest.skip("no cgroup v2 tree with pressure files on this host")
    work = (
        "import sys, threading, time\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "time.sleep(0.1)\n"
        "def burn():\n"
        "    end = time.thread_time() + 0.06\n"
        "    while time.thread_time() < end: pass\n"
        "worker = threading.Thread(target=burn); worker.start(); worker.join()\n"
        "sys.stdin.readline()\n"
    )
    group = cgroups.create(tree, f"var%tmp%layerbench-measure-{tmp_path.name}")
    helper = subprocess.Popen(
        [sys.executable, "-c", work], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert helper.stdin is not None and helper.stdout is not None
    try:
        assert helper.stdout.readline() == "ready\n"
        cgroups.place_all([helper.pid], group / "cgroup.procs")
        helper.stdin.write("go\n")
        helper.stdin.flush()
        counters = measure.run_timed(
            ["sleep", "0.5"], cwd=tmp_path, helper_pids=[helper.pid], helper_group=group
        )
        helper.stdin.write("done\n")
        helper.stdin.flush()
        helper.wait()
    finally:
        helper.kill()
        cgroups.remove(group)
    assert counters.status == "ok"
    assert 0.05 <= counters.helper_cpu_s < 0.2, counters.helper_cpu_s


def test_moving_the_child_into_its_groups_is_not_timed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child is put into its control groups before the clock starts: a move that takes
    300 ms (the kernel's cgroup lock can take milliseconds) adds nothing to the run's time."""
    from layerbench.linux import cgroups

    def slow_place(pids: list[int], procs: Path) -> None:
        import time

        time.sleep(0.3)

    monkeypatch.setattr(cgroups, "place_all", slow_place)
    counters = measure.run_timed(["true"], cwd=tmp_path, cgroups=[tmp_path / "cgroup.procs"])
    assert counters.status == "ok"
    assert counters.wall_s < 0.2, counters.wall_s


def test_the_gate_costs_the_run_nothing_it_can_count(tmp_path: Path) -> None:
    """The shell that holds the child at the gate has faulted in its own pages before the
    clock: those faults are taken off, so `true` reports what `true` and GNU time did."""
    counters = measure.run_timed(["true"], cwd=tmp_path)
    bare = measure.run_timed(["sh", "-c", "true"], cwd=tmp_path)
    assert counters.status == bare.status == "ok"
    # The gate's shell faults about 60 pages before it blocks; a second shell inside the
    # run faults at least as many again.
    assert counters.minflt < bare.minflt, (counters.minflt, bare.minflt)


@pytest.mark.skipif(measure.GNU_TIME is None, reason="GNU time is not installed: there is no wrapper")
def test_gnu_time_is_started_before_the_clock_and_only_the_command_is_execd_in_it(tmp_path: Path) -> None:
    """At the gate GNU time already runs and has forked the gate: once the clock starts only
    the command's exec remains (exec'ing GNU time there, after dropped caches, read its binary
    from the disk in every run: about a millisecond)."""
    from layerbench.linux import procfs

    seen: dict[str, object] = {}

    def at_gate() -> None:
        (pid,) = seen["pid"]  # type: ignore[misc]
        seen["exe"] = Path(f"/proc/{pid}/exe").resolve()
        seen["children"] = procfs.children(pid)

    counters = measure.run_timed(
        ["true"], cwd=tmp_path, on_start=lambda pid: seen.setdefault("pid", (pid,)), at_gate=at_gate
    )
    assert counters.status == "ok" and counters.maxrss_kb > 0
    assert seen["exe"] == Path(measure.GNU_TIME).resolve(), seen
    assert len(seen["children"]) == 1, seen  # type: ignore[arg-type]
