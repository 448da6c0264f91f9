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


def _reported_kib_reads(monkeypatch: pytest.MonkeyPatch, reads: list[int]) -> None:
    """The count of memory handed back, as the kernel would show it read after read (the
    last value repeats)."""
    values = iter(reads)
    last = [reads[0]]

    def read() -> int:
        last[0] = next(values, last[0])
        return last[0]

    monkeypatch.setattr(warm_memory.kernelstats, "read_reported_kib", read)
    monkeypatch.setattr(warm_memory, "_POLL_S", 0.001)


def test_the_wait_for_a_pass_ends_once_the_pass_has_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    # a pass comes after a few reads, hands back 300 KiB in two steps, then nothing moves
    _reported_kib_reads(monkeypatch, [1000, 1000, 1000, 1100, 1300])
    hold = warm_memory.Held(64 << 20, 0.0)
    passed = warm_memory.wait_for_reporting_pass(hold)
    assert passed.reported_kib == 300
    assert warm_memory._PASS_ENDED_S <= passed.waited_s < warm_memory._PASS_DUE_S
    assert passed.facts() == {"reporting_waited_s": passed.waited_s, "reporting_pass_kib": 300}


def test_with_no_pass_due_the_wait_gives_up_after_the_kernels_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    _reported_kib_reads(monkeypatch, [1000])
    monkeypatch.setattr(warm_memory, "_PASS_DUE_S", 0.2)
    passed = warm_memory.wait_for_reporting_pass(warm_memory.Held(64 << 20, 0.0))
    assert passed.reported_kib == 0 and 0.2 <= passed.waited_s < 0.5


def test_nothing_held_nothing_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    _reported_kib_reads(monkeypatch, [1000, 2000])
    assert warm_memory.wait_for_reporting_pass(warm_memory.Held(0, 0.0)) == warm_memory.ReportingPass(0.0, 0)


def test_where_the_kernel_reports_nothing_nothing_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm_memory.kernelstats, "read_reported_kib", lambda: None)
    assert warm_memory.wait_for_reporting_pass(warm_memory.Held(64 << 20, 0.0)).waited_s == 0.0
