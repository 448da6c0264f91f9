"""Time series during a timed run: every 100 ms, the stack's block devices' read and write
bytes and the bottom device's requests in flight (/proc/diskstats), the host's CPU busy and
iowait shares (/proc/stat) and its dirty and writeback memory (/proc/vmstat).

The sampler is one thread of the runner that sleeps between samples; each sample is three
small /proc reads. Its own CPU time is measured (thread CPU clock) and stored with the run,
so a report can show that it did not disturb the run. The workload is a child process:
its wait4 rusage never includes the sampler.
"""

import threading
import time
from dataclasses import asdict, dataclass, field

from layerbench.linux import procfs

INTERVAL_S = 0.1


@dataclass
class Sample:
    """What happened during one interval ending t_s seconds after the run started."""

    t_s: float
    dt_s: float
    read_bytes: int  # the stack's top device, like the run's own read_bytes
    write_bytes: int
    disk_read_bytes: int  # the bottom device (the disk behind a loop device)
    disk_write_bytes: int
    cpu_busy_pct: float  # host-wide: every CPU, not only the workload
    cpu_iowait_pct: float
    dirty_bytes: int = 0  # host-wide nr_dirty + nr_writeback at the end of the interval
    disk_in_flight: int = 0  # requests in flight on the bottom device at the end of the interval

    def as_row(self) -> dict[str, float]:
        return asdict(self)


@dataclass
class SamplerCost:
    """The sampler's own footprint during one run."""

    interval_s: float
    count: int
    cpu_s: float  # CPU time of the sampler thread
    wall_s: float  # how long it sampled

    @property
    def cpu_pct(self) -> float:
        """The sampler's CPU time as a share of one CPU over the run."""
        return 100.0 * self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def as_dict(self) -> dict[str, float]:
        return asdict(self) | {"cpu_pct": self.cpu_pct}


read_cpu = procfs.read_cpu


@dataclass
class Sampler:
    """Start before the child starts, stop after it is reaped: `with Sampler(devices) as s`."""

    devices: list[str]
    interval_s: float = INTERVAL_S
    samples: list[Sample] = field(default_factory=list)
    cost: SamplerCost | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="layerbench-sampler", daemon=True)
        self._top = self.devices[0] if self.devices else None
        self._bottom = self.devices[-1] if self.devices else None

    def __enter__(self) -> "Sampler":
        # The first reading is taken here, by the caller, right before the child starts: a
        # thread started now could be scheduled after the run has begun.
        self._first = self._read()
        self._cpu_start = time.thread_time()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        # ... and the last one by the caller too, right after the child was reaped.
        sampler_cpu = self._cpu_s
        started = time.thread_time()
        last = self._read()
        self.samples.append(self._delta(self._first[0], self._previous, last))
        self.cost = SamplerCost(
            interval_s=self.interval_s,
            count=len(self.samples),
            cpu_s=sampler_cpu + time.thread_time() - started,
            wall_s=last[0] - self._first[0],
        )

    def _read(self) -> tuple[float, dict[str, tuple[int, int, int]], tuple[int, int, int], int]:
        disks = procfs.read_diskstats(self.devices) if self.devices else {}
        return (
            time.monotonic(),
            {name: (c.read_bytes, c.write_bytes, c.in_flight) for name, c in disks.items()},
            read_cpu(),
            procfs.dirty_bytes(),
        )

    def _loop(self) -> None:
        cpu_start = time.thread_time()
        previous = self._first
        start = previous[0]
        ticks = 0
        # Sleep to a fixed schedule so the series does not drift with read costs.
        while not self._stop.wait(
            max(0.0, start + ticks * self.interval_s + self.interval_s - time.monotonic())
        ):
            ticks += 1
            current = self._read()
            self.samples.append(self._delta(start, previous, current))
            previous = current
        self._previous = previous
        self._cpu_s = time.thread_time() - cpu_start

    def _delta(
        self,
        start: float,
        before: tuple[float, dict[str, tuple[int, int, int]], tuple[int, int, int], int],
        after: tuple[float, dict[str, tuple[int, int, int]], tuple[int, int, int], int],
    ) -> Sample:
        def bytes_of(device: str | None, which: int) -> int:
            if device is None or device not in before[1] or device not in after[1]:
                return 0
            return after[1][device][which] - before[1][device][which]

        total = after[2][0] - before[2][0]
        idle = after[2][1] - before[2][1]
        iowait = after[2][2] - before[2][2]
        return Sample(
            t_s=round(after[0] - start, 4),
            dt_s=round(after[0] - before[0], 4),
            read_bytes=bytes_of(self._top, 0),
            write_bytes=bytes_of(self._top, 1),
            disk_read_bytes=bytes_of(self._bottom, 0),
            disk_write_bytes=bytes_of(self._bottom, 1),
            cpu_busy_pct=100.0 * (total - idle - iowait) / total if total > 0 else 0.0,
            cpu_iowait_pct=100.0 * iowait / total if total > 0 else 0.0,
            dirty_bytes=after[3],
            disk_in_flight=after[1][self._bottom][2] if self._bottom in after[1] else 0,
        )
