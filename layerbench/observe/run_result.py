"""What one run yields, wherever it ran (this host or a guest): the counters of the timed
child, and what the workload says of the work it did. The trial procedure
(executors/procedure.py) makes one; a guest hands it back to the host as it is."""

from dataclasses import dataclass, field
from typing import Any

from layerbench.observe.measure import RunCounters


@dataclass
class RunResult:
    counters: RunCounters
    units: float | None = None  # the work the run did, for its throughput
    unit: str | None = None  # "bytes", "files", "ios", ...
    facts: dict[str, Any] = field(default_factory=dict)  # the workload's and the stack's
    metrics: dict[str, float] = field(default_factory=dict)  # the workload's own registry metrics
    # Bytes the run claims are durable when it ends (observe/durability.py); None: no claim.
    durable_bytes: int | None = None
    # Bytes of the trial's own files below the stack still dirty or under writeback right
    # after the run, read where the run ran (a guest reads its own page cache, which no
    # reading on the host sees); None: no claim, or the kernel cannot tell.
    dirty_below: int | None = None
