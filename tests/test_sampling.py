"""The time-series sampler: real /proc reads during real runs, and its own cost."""

from pathlib import Path

from layerbench.linux.mounts import devices_under
from layerbench.observe import measure, sampling


def test_samples_cover_the_run_every_100ms(tmp_path: Path) -> None:
    counters = measure.run_timed(["sleep", "0.55"], cwd=tmp_path)
    samples = counters.samples
    # 0.55 s at 100 ms: five full intervals and the one the stop cut short.
    assert 5 <= len(samples) <= 8, samples
    times = [s["t_s"] for s in samples]
    assert times == sorted(times) and times[-1] >= counters.wall_s * 0.95
    assert all(0 < s["dt_s"] < 0.3 for s in samples)
    assert all(0 <= s["cpu_busy_pct"] <= 100 and 0 <= s["cpu_iowait_pct"] <= 100 for s in samples)
    cost = counters.sampler
    assert cost["count"] == len(samples) and cost["interval_s"] == sampling.INTERVAL_S
    # Two small /proc reads every 100 ms (0.05 ms) and the wake-up (about 1 ms of CPU on this
    # kind of VM): 1.1-1.9 % of one CPU in a 0.55 s run here, 3.8 % once under a loaded suite.
    assert cost["cpu_pct"] < 5.0, cost


def test_samples_see_the_bytes_a_synced_write_puts_on_the_disk(needs_root: None, tmp_path: Path) -> None:
    devices = devices_under(tmp_path)
    assert devices, "the test directory lies on no block device"
    counters = measure.run_timed(
        ["dd", "if=/dev/zero", "of=data", "bs=1M", "count=64", "conv=fsync"], cwd=tmp_path, devices=devices
    )
    assert counters.status == "ok"
    written = sum(s["write_bytes"] for s in counters.samples)
    # The series adds up to the run's own diskstats delta (same device, same interval).
    assert written >= 64 * 2**20 * 0.9
    assert abs(written - counters.write_bytes) <= 0.05 * counters.write_bytes + 2**20
    assert sum(s["disk_write_bytes"] for s in counters.samples) >= written * 0.9


def test_cpu_shares_from_proc_stat() -> None:
    total, idle, iowait = sampling.read_cpu()
    assert total > idle >= 0 and total > iowait >= 0
