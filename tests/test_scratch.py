import collections
import os
import subprocess
from pathlib import Path

import pytest

from layerbench.core.errors import SetupError, UserError
from layerbench.linux import mounts
from layerbench.scratch import MARKER, Journal, Scratch, check_root, placement


@pytest.mark.parametrize("bad", ["/", "/proc/x", "/sys", "/dev/shm/lb", "/etc/layerbench"])
def test_refuses_system_paths(bad: str) -> None:
    with pytest.raises(UserError, match="refusing"):
        check_root(Path(bad))


def test_refuses_a_foreign_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("not ours")
    with pytest.raises(UserError, match="not made by layerbench"):
        check_root(tmp_path)
    (tmp_path / MARKER).touch()
    assert check_root(tmp_path) == tmp_path.resolve()


def test_refuses_a_mount_point_it_did_not_make(needs_root: None, scratch_root: Path) -> None:
    scratch_root.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "foreign", str(scratch_root)], check=True)
    try:
        with pytest.raises(UserError, match="mount point layerbench did not create"):
            check_root(scratch_root)
    finally:
        subprocess.run(["umount", str(scratch_root)], check=True)


def test_journal_pending_and_done(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    first = journal.add("path", tmp_path / "a")
    second = journal.add("mount", tmp_path / "b")
    journal.update(second, pid=123)
    journal.done(first)
    with open(journal.path, "a") as handle:
        handle.write('{"add": {"id": 9, "kin')  # torn by a SIGKILL mid-write
    pending = journal.pending()
    assert [(r.ident, r.kind, r.info) for r in pending] == [(second, "mount", {"pid": 123})]
    assert Journal(journal.path).add("path", "x") == second + 1


def test_lock_refuses_a_second_holder_and_names_it(needs_root: None, scratch_root: Path) -> None:
    first = Scratch(scratch_root)
    first.lock("first run")
    try:
        code = (
            "from pathlib import Path; from layerbench.scratch import Scratch;"
            f"Scratch(Path({str(scratch_root)!r})).lock('second')"
        )
        done = subprocess.run(
            ["python3", "-c", code],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
        )
        assert done.returncode != 0
        assert f"pid {os.getpid()} (first run)" in done.stderr
    finally:
        first.unlock()


def test_clean_removes_what_a_killed_run_left(needs_root: None, scratch_root: Path) -> None:
    scratch = Scratch(scratch_root)
    workdir = scratch.new_dir("trials", "e1-t1")
    target = workdir / "mnt"
    target.mkdir()
    ident = scratch.journal.add("mount", target)
    mounts.mount("layerbench", target, fstype="tmpfs", options=["size=1M"])
    assert mounts.is_mount_point(target) and ident
    # The run dies here: nothing was torn down. A new opening of the root cleans up.
    removed = Scratch(scratch_root).clean().removed
    assert f"unmounted {target}" in removed and f"deleted {workdir}" in removed
    assert not mounts.is_mount_point(target) and not workdir.exists()
    assert Journal(scratch_root / "journal.jsonl").pending() == []


def test_clean_finds_a_daemon_whose_pid_never_reached_the_journal(
    needs_root: None, scratch_root: Path
) -> None:
    scratch = Scratch(scratch_root)
    target = scratch.new_dir("trials", "e1-t1") / "L0-fuse"
    # The run dies after starting its daemon and before journaling the pid.
    scratch.journal.add("process", f"bindfs {target}", named=str(target))
    daemon = subprocess.Popen(["sh", "-c", "sleep 300", str(target)], start_new_session=True)
    try:
        removed = Scratch(scratch_root).clean().removed
        assert f"stopped bindfs {target} (pid {daemon.pid})" in removed
        assert daemon.wait(timeout=5) is not None
    finally:
        daemon.kill()
        daemon.wait()


def test_a_helper_must_name_a_path_in_the_root(needs_root: None, scratch_root: Path) -> None:
    scratch = Scratch(scratch_root)
    with (
        pytest.raises(SetupError, match="must name a path in"),
        scratch.process(lambda: 1, "x", named=Path("/usr")),
    ):
        pass


def test_mounted_refuses_targets_outside_the_root(needs_root: None, scratch_root: Path) -> None:
    scratch = Scratch(scratch_root)
    with (
        pytest.raises(UserError, match="outside the scratch root"),
        scratch.mounted("x", Path("/mnt"), fstype="tmpfs"),
    ):
        pass


def test_clean_removes_what_the_journal_never_heard_of(needs_root: None, scratch_root: Path) -> None:
    """A foreign mount planted under trials/, a loop device over an image in the root and a
    process working in it: clean removes all three whatever the journal says, and says so."""
    scratch = Scratch(scratch_root)
    workdir = scratch.new_dir("trials", "e1-t0")
    planted = workdir / "planted"
    planted.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "planted", str(planted)], check=True)
    image = workdir / "disk.img"
    image.write_bytes(b"\0" * 2**20)
    device = subprocess.run(
        ["losetup", "--find", "--show", str(image)], capture_output=True, text=True, check=True
    ).stdout.strip()
    worker = subprocess.Popen(["sleep", "300"], cwd=workdir, start_new_session=True)
    try:
        recovery = Scratch(scratch_root).clean()
        assert recovery.problems == []
        assert any(
            line.startswith(f"unmounted {planted}") and "not in the journal" in line
            for line in recovery.removed
        ), recovery.removed
        assert f"detached {device} ({image})" in recovery.removed
        assert any(f"stopped pid {worker.pid}" in line for line in recovery.removed)
        assert f"deleted {workdir}" in recovery.removed
        assert worker.wait(timeout=5) is not None  # (reaped by clean itself, in this process)
        assert not mounts.is_mount_point(planted) and not workdir.exists()
    finally:
        worker.kill()
        worker.wait()
        subprocess.run(["umount", "-l", str(planted)], capture_output=True)
        subprocess.run(["losetup", "-d", device], capture_output=True)


def test_clean_says_what_it_cannot_remove_and_keeps_it_journaled(
    needs_root: None, scratch_root: Path
) -> None:
    scratch = Scratch(scratch_root)
    workdir = scratch.new_dir("trials", "e1-t0")
    (workdir / "file").write_text("x")
    subprocess.run(["chattr", "+i", str(workdir / "file")], check=True)
    try:
        recovery = Scratch(scratch_root).clean()
        assert len(recovery.problems) == 1 and str(workdir) in recovery.problems[0]
        assert [r.target for r in Journal(scratch_root / "journal.jsonl").pending()] == [str(workdir)]
    finally:
        subprocess.run(["chattr", "-i", str(workdir / "file")], check=True)
    assert f"deleted {workdir}" in Scratch(scratch_root).clean().removed


def _inode_flags(path: Path) -> int:
    import fcntl
    import struct

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return int(struct.unpack("i", fcntl.ioctl(fd, 0x80086601, struct.pack("i", 0)))[0])
    finally:
        os.close(fd)


def test_trial_directories_spread_over_inode_groups(needs_root: None, scratch_root: Path) -> None:
    """On ext4 the trials' parent carries the top-of-hierarchy flag (chattr +T), so each trial's
    directory lands in an inode group of Orlov's choosing, not among the inodes the previous
    trial just freed; on a file system without inode flags (tmpfs) nothing fails."""
    scratch_root.mkdir(parents=True)
    image, target = scratch_root / "fs.img", scratch_root / "mnt"
    target.mkdir()
    subprocess.run(["truncate", "-s", "256M", str(image)], check=True)
    features = "^has_journal,^flex_bg"  # groups chosen one by one, as on a large file system
    subprocess.run(["mkfs.ext4", "-q", "-F", "-O", features, "-N", "65536", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(target)], check=True)
    try:
        with Scratch(target / "root") as scratch:
            groups = set()
            for index in range(6):
                with scratch.directory("trials", f"t{index}") as workdir:
                    groups.add(workdir.stat().st_ino // (65536 // 32))  # 32 groups of 2048 inodes
                    assert _inode_flags(workdir.parent) & 0x00020000
            assert len(groups) > 1, groups  # a shared group every time is what the flag prevents
    finally:
        subprocess.run(["umount", "-d", str(target)], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8M", "tmpfs", str(target)], check=True)
    try:
        with Scratch(target / "root") as scratch, scratch.directory("trials", "t") as workdir:
            assert workdir.is_dir()
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_a_trial_s_files_keep_away_from_the_inodes_recent_trials_freed(
    needs_root: None, scratch_root: Path
) -> None:
    """On an ext4 without a journal, each trial's files start in a group where no trial ended
    in the last six minutes (Orlov would pick the group a trial just emptied: the name of each
    try differs, since Orlov hashes it); with a journal, nothing is probed."""
    scratch_root.mkdir(parents=True)
    image, target = scratch_root / "fs.img", scratch_root / "mnt"
    target.mkdir()
    subprocess.run(["truncate", "-s", "256M", str(image)], check=True)
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-O", "^has_journal,^flex_bg", "-N", "65536", str(image)], check=True
    )
    subprocess.run(["mount", "-o", "loop", str(image), str(target)], check=True)
    try:
        with Scratch(target / "root") as scratch:
            assert scratch.inode_groups.per_group == 2048  # 32 groups
            groups = []
            for index in range(8):
                with scratch.directory("trials", f"t{index}") as workdir:
                    for number in range(placement.MATERIAL):  # enough freed to keep clear
                        (workdir / f"f{number}").touch()
                    groups.append(((workdir / "f0").stat().st_ino - 1) // 2048)
                    assert [p.name for p in workdir.parent.iterdir()] == [f"t{index}"]
            assert len(set(groups)) == len(groups), groups  # never where a trial just ended
            journal = (target / "root" / "journal.jsonl").read_text()
            assert ".try" in journal and not list((target / "root" / "trials").iterdir())
    finally:
        subprocess.run(["umount", "-d", str(target)], check=True)


def test_a_ctrl_c_while_a_trial_directory_is_deleted_still_deletes_it(
    needs_root: None, scratch_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first Ctrl-C lands wherever the main thread is: here half-way through the tree's
    removal. The directory is gone anyway, its journal entry closed, and the interrupt goes on."""
    import layerbench.scratch.resources as resources

    removing = resources.remove_path
    calls: list[str] = []

    def interrupted_once(target: str, root: Path) -> collections.Counter[int] | None:
        calls.append(target)
        if len(calls) == 1:
            for child in sorted(Path(target).iterdir())[:1]:
                child.unlink()  # half-way: some of the tree already gone
            raise KeyboardInterrupt
        return removing(target, root)

    monkeypatch.setattr(resources, "remove_path", interrupted_once)
    scratch = Scratch(scratch_root)
    scratch.lock("test")
    try:
        with pytest.raises(KeyboardInterrupt), scratch.directory("trials", "t0") as workdir:
            for index in range(3):
                (workdir / f"f{index}").write_text("x")
        assert not workdir.exists() and len(calls) == 2
        assert scratch.journal.pending() == []
    finally:
        scratch.unlock()


def test_a_tree_is_removed_as_rmtree_would_links_and_all(tmp_path: Path) -> None:
    """Many files (the side-by-side unlinks), nested directories, an empty one, and symbolic
    links to a file and a directory outside the tree: the tree goes, what the links point to stays."""
    from layerbench.scratch.resources import remove_tree

    outside = tmp_path / "outside"
    (outside / "kept").mkdir(parents=True)
    (outside / "kept.txt").write_text("kept")
    (outside / "kept" / "inside.txt").write_text("kept")
    top = tmp_path / "tree"
    for depth in range(3):
        level = top.joinpath(*[f"d{d}" for d in range(depth + 1)])
        level.mkdir(parents=True)
        for index in range(40):
            (level / f"f{index}").write_bytes(b"x" * index)
    (top / "empty").mkdir()
    (top / "d0" / "to-dir").symlink_to(outside / "kept")
    (top / "d0" / "to-file").symlink_to(outside / "kept.txt")
    (top / "dangling").symlink_to(tmp_path / "nowhere")
    remove_tree(top)
    assert not top.exists() and not top.is_symlink()
    assert (outside / "kept" / "inside.txt").read_text() == (outside / "kept.txt").read_text() == "kept"
