"""Memory held warm for a run: mapped and touched while held, gone once released."""

import pytest

from layerbench.observe import warm_memory


def _rss_bytes() -> int:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmRSS:"))


@pytest.mark.parametrize("huge", [True, False], ids=["huge-pages", "small-pages"])
def test_held_memory_is_resident_until_released(huge: bool) -> None:
    before = _rss_bytes()
    with warm_memory.held(64 << 20, huge=huge) as held:
        # 64 MiB with its slack, all of it touched (MAP_POPULATE), not merely reserved
        assert held.nbytes >= 64 << 20
        assert _rss_bytes() - before >= held.nbytes * 0.9
        assert held.facts() == {"warm_memory_bytes": held.nbytes}
        held.release()
        assert _rss_bytes() - before < 16 << 20
        held.release()  # twice is harmless: the executor's ExitStack releases again
    assert _rss_bytes() - before < 16 << 20


def test_nothing_is_held_for_a_run_that_takes_no_memory() -> None:
    with warm_memory.held(0) as held:
        assert held.nbytes == 0 and held.facts() == {"warm_memory_bytes": 0}


def test_a_hold_never_takes_more_than_half_the_available_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm_memory, "_available_bytes", lambda: 128 << 20)
    with warm_memory.held(1 << 50) as held:  # a petabyte: what a plan's typo could ask
        assert held.nbytes == 64 << 20
