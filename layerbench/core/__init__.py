"""What every other layer uses and nothing else: the two kinds of failure (errors), sizes as
people write them, the failpoints the recovery tests freeze a run at, the one registry of
what a run measures (metrics) and that of what else a run records (facts)."""
