"""Checking the tool and the host: the selftest's checks (a known effect, A/A, sensitivity,
the simulated error rates of the sequential design and of its predictions) and `doctor`."""
