"""The one registry of what a run measures. Each metric is named once, here: the results
store's columns, the statistics' comparisons, the why read-out's labels and rules and
the report's table columns all derive from this list. Adding a counter is one entry here
plus the code that measures it (which fills the field of the same name in the run's
counters)."""

from dataclasses import dataclass, replace
from typing import Literal

Better = Literal["lower", "higher"] | None


@dataclass(frozen=True)
class Metric:
    name: str  # the column, the JSON key, the summary row's metric
    label: str  # words for the reports and why lines
    unit: str
    integer: bool = False  # stored as INTEGER, else REAL
    better: Better = None  # which way is better; None: neither (a counter)
    compared: bool = True  # each stack's runs are compared with the baseline's (a summary row)
    headline: bool = False  # a column of the report's per-workload table
    explains: bool = False  # the why read-out may cite it as a counter that moved
    material: float = 0.0  # the least change of a median that can explain anything (why rule 2)
    # Reported by the workload (its Prepared.metrics after the run), not by every run: fio's
    # IOPS and latencies. A workload that does not report it has no summary row for it.
    reported: bool = False
    # Measured only where the host has it (PSI, schedstat): a workload whose runs all lack
    # it has no summary row for it.
    optional: bool = False


def _optional(*found: Metric) -> tuple[Metric, ...]:
    return tuple(replace(metric, optional=True) for metric in found)


METRICS: tuple[Metric, ...] = (
    Metric("wall_s", "elapsed time", "s", better="lower", headline=True),
    Metric("throughput", "throughput", "units/s", better="higher", headline=True),
    Metric("user_s", "user time", "s", better="lower", explains=True, material=0.01),
    Metric("sys_s", "system time", "s", better="lower", explains=True, material=0.01),
    Metric("cpu_pct", "CPU", "%", headline=True, material=2.0),
    Metric("maxrss_kb", "peak resident memory", "KiB", integer=True),
    Metric("minflt", "minor page faults", "faults", integer=True, headline=True, explains=True, material=100),
    Metric("majflt", "major page faults", "faults", integer=True, headline=True, explains=True, material=10),
    Metric("inblock", "block input", "512-byte blocks", integer=True, explains=True, material=2048),
    Metric(
        "oublock",
        "block output",
        "512-byte blocks",
        integer=True,
        headline=True,
        explains=True,
        material=2048,
    ),
    Metric("nvcsw", "voluntary context switches", "switches", integer=True, explains=True, material=10),
    Metric("nivcsw", "involuntary context switches", "switches", integer=True, explains=True, material=10),
    Metric("read_bytes", "bytes read from the device", "bytes", integer=True, explains=True, material=2**20),
    Metric(
        "write_bytes", "bytes written to the device", "bytes", integer=True, explains=True, material=2**20
    ),
    Metric("read_ios", "read requests to the device", "ios", integer=True, compared=False),
    Metric("write_ios", "write requests to the device", "ios", integer=True, compared=False),
    Metric("helper_cpu_s", "CPU of helper processes", "s", better="lower", headline=True),
    # From the kernel (kernelstats): the run's own PSI where it has a cgroup v2 group, else
    # system-wide; the rest say system-wide in their label. Absent (None) on a host without.
    *_optional(
        Metric(
            "psi_io_some_s", "time stalled on I/O (PSI)", "s", better="lower", explains=True, material=0.01
        ),
        Metric("psi_io_full_s", "time fully stalled on I/O (PSI)", "s", compared=False),
        Metric(
            "psi_cpu_some_s",
            "time waiting for a CPU (PSI)",
            "s",
            better="lower",
            explains=True,
            material=0.01,
        ),
        Metric(
            "psi_memory_some_s",
            "time stalled on memory (PSI)",
            "s",
            better="lower",
            explains=True,
            material=0.01,
        ),
        Metric(
            "kthread_cpu_s",
            "CPU of kernel threads (system-wide)",
            "s",
            better="lower",
            explains=True,
            material=0.01,
        ),
        Metric(
            "vm_majfault",
            "major page faults (system-wide)",
            "faults",
            integer=True,
            explains=True,
            material=10,
        ),
        Metric("vm_written_bytes", "pages written back (system-wide)", "bytes", integer=True, compared=False),
        Metric(
            "dirty_peak_bytes",
            "peak dirty + writeback memory (system-wide)",
            "bytes",
            integer=True,
            compared=False,
        ),
        Metric(
            "disk_write_bytes",
            "bytes written to the disk below",
            "bytes",
            integer=True,
            explains=True,
            material=2**20,
        ),
        Metric("disk_busy_pct", "disk busy", "%", explains=True, material=5.0),
        Metric("disk_wait_ms", "disk wait per request", "ms", better="lower", explains=True, material=0.05),
        Metric(
            "disk_in_flight_peak", "disk requests in flight, peak", "requests", integer=True, compared=False
        ),
    ),
    *(
        metric
        for direction in ("read", "write")
        for metric in (
            Metric(f"{direction}_iops", f"{direction} IOPS", "ops/s", better="higher", reported=True),
            Metric(
                f"{direction}_bw_bytes", f"{direction} bandwidth", "bytes/s", better="higher", reported=True
            ),
            Metric(
                f"{direction}_io_bytes",
                f"{direction} bytes (fio)",
                "bytes",
                integer=True,
                compared=False,
                reported=True,
            ),
            *(
                Metric(
                    f"{direction}_clat_{name}_ns",
                    f"{direction} completion latency {label}",
                    "ns",
                    better="lower",
                    reported=True,
                )
                for name, label in (
                    ("mean", "mean"),
                    ("p50", "p50"),
                    ("p90", "p90"),
                    ("p99", "p99"),
                    ("p999", "p99.9"),
                )
            ),
        )
    ),
    Metric("fio_runtime_s", "fio's own runtime", "s", better="lower", reported=True),
)

BY_NAME: dict[str, Metric] = {metric.name: metric for metric in METRICS}


def compared() -> dict[str, Better]:
    """metric -> its better direction, for every metric the statistics compare."""
    return {m.name: m.better for m in METRICS if m.compared}


def reported() -> tuple[str, ...]:
    """The metrics a workload reports itself (not every run has them)."""
    return tuple(m.name for m in METRICS if m.reported)


def column_names() -> tuple[str, ...]:
    """The runs table's measured columns, in order (throughput is derived, stored after
    units and unit)."""
    return tuple(m.name for m in METRICS if m.name != "throughput")


def column_definitions() -> str:
    """SQL column definitions of the measured columns."""
    return ", ".join(f"{name} {'INTEGER' if BY_NAME[name].integer else 'REAL'}" for name in column_names())


def headline() -> tuple[str, ...]:
    return tuple(m.name for m in METRICS if m.headline)


def labels() -> dict[str, str]:
    """The why read-out's counters (and CPU %) with their labels."""
    return {m.name: m.label for m in METRICS if m.explains or m.name == "cpu_pct"}


def material() -> dict[str, float]:
    return {m.name: m.material for m in METRICS if m.material}
