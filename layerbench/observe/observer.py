"""The two small interfaces of observing a run. Around the timed run, each observer's
capture says what it saw as the run's facts (the memory handed back to the hypervisor, the
memory held warm, a block trace); after the experiment, each reader turns the stored runs
into the reports' warnings (reports/readers.py lists them: disturbed runs, data not durable,
a trace not recorded, a guest's figures)."""

from collections.abc import Callable
from typing import Any, Protocol

from layerbench.core.runs import RunRecord

Reader = Callable[[list[RunRecord]], list[str]]


class Capture(Protocol):
    """What an observer saw around one timed run, read once the run is over."""

    def facts(self) -> dict[str, Any]: ...
