"""scratch/placement.py: how long ago a trial ended near a group, and which try is kept."""

import pytest

from layerbench.scratch import placement
from layerbench.scratch.placement import InodeGroups, Placed


def _groups(monkeypatch: pytest.MonkeyPatch, clock: list[float], nearby: int = 2) -> InodeGroups:
    monkeypatch.setattr(placement.time, "monotonic", lambda: clock[0])
    groups = InodeGroups.__new__(InodeGroups)
    groups.per_group, groups.nearby, groups._avoid_until = 8192, nearby, {}
    return groups


def test_freed_ago_is_the_latest_nearby_end_within_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    groups = _groups(monkeypatch, clock)
    groups.ended(10)
    clock[0] = 1100.0
    groups.ended(12)
    clock[0] = 1130.0
    assert groups.freed_ago(11) == 30.0  # group 12 ended 30 s ago, group 10 130 s ago
    assert groups.freed_ago(9) == 130.0  # only group 10 is within 2
    assert groups.freed_ago(20) is None and groups.freed_ago(None) is None
    clock[0] = 1000.0 + placement.RECENT_S + 1
    assert groups.freed_ago(9) is None  # ext4 has forgotten group 10's inodes by now
    assert groups.recent(12) and not groups.recent(9)


def test_the_first_clear_try_is_kept_else_the_one_freed_longest_ago() -> None:
    tries = [Placed(3, 1, 20.0), Placed(40, 2, None), Placed(7, 3, None)]
    assert placement.best(tries).group == 40
    assert placement.best([Placed(3, 1, 20.0), Placed(9, 2, 300.0), Placed(5, 3, 2.0)]).group == 9
