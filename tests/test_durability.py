"""The durability verdict from its two readings: the bytes the bottom device wrote during the
run (any writer's) and the trial's own files still dirty after it (its own only)."""

from layerbench.observe import durability

MiB = 2**20
DEVICES = ["loop0", "vda"]


def _check(reached: int, dirty: int | None) -> dict:
    fact = durability.check(64 * MiB, DEVICES, {"vda": {"write_bytes": reached}}, dirty)
    assert fact is not None
    return fact


def test_a_miss_a_busy_neighbour_hides_from_the_device_is_seen_in_the_files() -> None:
    """528 MiB of another program's writes reached the disk; the 64 MiB stayed dirty below."""
    fact = _check(528 * MiB, 64 * MiB)
    assert fact["durable"] is False
    assert durability.describe(fact) == "64M of 64M was still dirty below the stack when the run ended"


def test_durable_needs_both_readings() -> None:
    assert _check(64 * MiB, 0)["durable"] is True
    assert _check(64 * MiB, 6 * MiB)["durable"] is True  # within 1 - SHARE of the claim
    assert _check(64 * MiB, 7 * MiB)["durable"] is False
    short = _check(4096, 0)  # clean files, but nothing reached the disk: a sync that stopped
    assert short["durable"] is False
    assert durability.describe(short) == "only 4K of 64M reached vda inside the timed run"


def test_without_cachestat_the_device_decides_alone() -> None:
    assert _check(64 * MiB, None)["durable"] is True
    assert _check(4096, None)["durable"] is False


def test_a_fact_of_an_older_store_is_described() -> None:
    old = {"claimed_bytes": 64 * MiB, "reached_bytes": 4096, "device": "vda", "durable": False}
    assert durability.describe(old) == "only 4K of 64M reached vda inside the timed run"


def test_nothing_to_check_without_a_claim_or_a_device() -> None:
    assert durability.check(None, DEVICES, {"vda": {"write_bytes": 0}}) is None
    assert durability.check(64 * MiB, [], {}) is None
