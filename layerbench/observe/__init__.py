"""Observing a run: the timed child and its counters (measure), the kernel's counters around
it, the time series during it, the durability check, block tracing, the noise and the
settle wait before it, the memory held up to it, the drift sentinel, and the host and its
scratch file system as they were."""
