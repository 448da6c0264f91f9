from pathlib import Path

import pytest

from layerbench import measure


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
    from layerbench.mounts import devices_under

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
