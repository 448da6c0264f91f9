"""scratch/placement.py: how long ago a trial ended in a group's flex group, which try is
kept, and what the next run on the scratch root learns of this one."""

import collections
from pathlib import Path

import pytest

from layerbench.scratch import placement
from layerbench.scratch.placement import InodeGroups, Placed
from layerbench.scratch.resources import remove_tree


def _groups(monkeypatch: pytest.MonkeyPatch, clock: list[float], root: Path, span: int = 16) -> InodeGroups:
    """An InodeGroups as on an ext4 of 2,048 groups without a journal, on a scripted clock."""
    monkeypatch.setattr(placement.time, "time", lambda: clock[0])
    monkeypatch.setattr(placement, "_no_journal_ext4", lambda root: (128 * span, 8192))
    return InodeGroups(root)


def _freed(*groups: int, count: int = placement.MATERIAL) -> collections.Counter[int]:
    """What a trial freed: count inodes in each of these groups (8,192 a group)."""
    return collections.Counter({group * 8192 + 1 + index: 1 for group in groups for index in range(count)})


def test_freed_ago_is_the_latest_end_in_the_same_flex_group(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clock = [1000.0]
    groups = _groups(monkeypatch, clock, tmp_path)
    groups.ended(_freed(17))  # flex group 16-31
    clock[0] = 1100.0
    groups.ended(_freed(30))
    clock[0] = 1130.0
    assert groups.freed_ago(16) == 30.0 and groups.freed_ago(31) == 30.0
    assert groups.freed_ago(15) is None and groups.freed_ago(32) is None and groups.freed_ago(None) is None
    clock[0] = 1100.0 + placement.RECENT_S + 1
    assert groups.freed_ago(20) is None  # ext4 has forgotten those inodes by now
    assert not groups.recent(20)


def test_the_next_run_on_the_scratch_root_keeps_away_from_this_ones_groups(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clock = [1000.0]
    _groups(monkeypatch, clock, tmp_path).ended(_freed(40))
    clock[0] = 1050.0
    later = _groups(monkeypatch, clock, tmp_path)
    assert later.freed_ago(47) == 50.0
    later.forget_if_expired()
    assert (tmp_path / placement.STATE).exists()  # still to be avoided
    clock[0] = 1000.0 + placement.RECENT_S + 1
    last = _groups(monkeypatch, clock, tmp_path)
    assert last.freed_ago(47) is None
    last.forget_if_expired()
    assert not (tmp_path / placement.STATE).exists()
    (tmp_path / placement.STATE).write_text("{not json")
    assert _groups(monkeypatch, clock, tmp_path).freed_ago(47) is None  # unreadable: nothing known


def test_the_first_clear_try_is_kept_else_the_one_freed_longest_ago() -> None:
    tries = [Placed(3, 1, 20.0), Placed(40, 2, None), Placed(7, 3, None)]
    assert placement.best(tries).group == 40
    assert placement.best([Placed(3, 1, 20.0), Placed(9, 2, 300.0), Placed(5, 3, 2.0)]).group == 9


def test_a_state_that_cannot_be_written_fails_no_teardown(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / placement.STATE).mkdir()  # in its way: replacing it fails
    groups = _groups(monkeypatch, [1000.0], tmp_path)
    groups.ended(_freed(3))
    assert groups.recent(3)  # still known to this run
    assert sorted(p.name for p in tmp_path.iterdir()) == [placement.STATE]  # no .tmp left


def test_a_trial_is_kept_clear_of_every_block_its_files_took_and_a_next_one_of_the_blocks_after_its_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A trial's files spread past its first flex group (each new directory a step further):
    every block they took is avoided, and a new try must be clear for as many blocks after its
    own as a trial of this run spread, at most REACH_MAX (one that wrapped round the end)."""
    clock = [1000.0]
    groups = _groups(monkeypatch, clock, tmp_path)
    groups.ended(_freed(33, 50) + _freed(70, count=placement.MATERIAL - 1))  # blocks 2 and 3, 4 hardly
    assert groups.reach == 1
    clock[0] = 1010.0
    assert groups.freed_ago(16) == 10.0  # block 1: clear itself, but the next one is taken
    assert groups.freed_ago(50) == 10.0 and groups.freed_ago(0) is None and groups.freed_ago(64) is None
    assert groups.freed_ago(80) is None  # a few inodes freed there: not worth a block
    groups.ended(_freed(0, 2040))  # wrapped round: blocks 0 and 127
    assert groups.reach == placement.REACH_MAX


def test_a_removed_trees_inode_numbers_are_its_entries(tmp_path: Path) -> None:
    """What the teardown hands to InodeGroups.ended: every entry's inode, read from the
    directories as the tree is removed, and a directory that once held many entries (deleted
    by the run, as metadata's are) standing for them."""
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    for path in (tree / "f", tree / "a" / "g", tree / "a" / "b" / "h"):
        path.write_text("x")
    emptied = tree / "emptied"
    emptied.mkdir()
    for index in range(400):  # names long enough to take more than one block of entries
        (emptied / f"{index:04d}-{'x' * 40}").touch()
    for child in emptied.iterdir():
        child.unlink()
    emptied_inode, blocks = emptied.stat().st_ino, emptied.stat().st_size // 4096
    entries = [tree / "f", tree / "a", tree / "a" / "g", tree / "a" / "b", tree / "a" / "b" / "h"]
    expected = collections.Counter({p.stat().st_ino: 1 for p in entries})
    expected[emptied_inode] = 1 + (blocks * 128 if blocks > 1 else 0)
    freed = remove_tree(tree)
    assert freed == expected and not tree.exists()
    if blocks > 1:  # ext4 and xfs keep a directory's size; tmpfs has no blocks to keep
        assert freed[emptied_inode] >= placement.MATERIAL


def test_nothing_is_kept_clear_where_nothing_is_placed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(placement, "_no_journal_ext4", lambda root: None)
    groups = InodeGroups(tmp_path)
    groups.ended(_freed(3))
    assert groups.freed_ago(3) is None and not (tmp_path / placement.STATE).exists()


def test_what_a_block_cannot_have_held_is_kept_clear_in_the_next(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Directories in one block that stood for more entries than half its inodes (the room
    taken as free) spilled into the blocks after it: those are kept clear too, at most
    REACH_MAX of them, and the last block spills into the first."""
    room = 16 * 8192 // 2
    _groups(monkeypatch, [1000.0], tmp_path).ended(
        collections.Counter({16 * 8192 * 5 + 1: room + 3 * placement.MATERIAL})
    )
    later = _groups(monkeypatch, [1000.0], tmp_path)  # reach 0: each block on its own
    assert [later.recent(16 * block) for block in (4, 5, 6, 7)] == [False, True, True, False]
    _groups(monkeypatch, [1000.0], tmp_path).ended(collections.Counter({16 * 8192 * 127 + 1: 10 * room}))
    later = _groups(monkeypatch, [1000.0], tmp_path)
    assert [later.recent(16 * block) for block in (127, 0, 1, 2)] == [True, True, True, False]
