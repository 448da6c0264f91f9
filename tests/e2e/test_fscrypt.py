"""The fscrypt layer for real: an ext4 image with the encrypt feature, a directory under a
v2 policy unlocked by a random key; writes and metadata in it; nothing left after a run or
after kill -9 and clean."""

import json
import subprocess
from pathlib import Path

import pytest
from helpers import TEST_ROOT, cli, leftovers, leftovers_after, run_plan, start_cli, wait_stopped

pytestmark = pytest.mark.e2e

PLAN = """
name = "fscrypt"
reps = 1
warmup = 0
rerun_disturbed = 0
baseline = "ext4"
[stacks.ext4]
layers = [{ kind = "image", size = "128M" }]
[stacks.encrypted]
layers = [{ kind = "fscrypt", size = "128M" }]
sweep = { "layers.0.padding" = [4, 32] }
[workloads.write]
kind = "stream-write"
size = "8M"
[workloads.files]
kind = "metadata"
files = 100
"""


def test_writes_and_metadata_in_an_encrypted_directory(needs_root: None, tmp_path: Path) -> None:
    scratch = TEST_ROOT / "fscrypt"
    document = run_plan(tmp_path, PLAN, scratch)
    runs = document["runs"]
    assert len(runs) == 6 and all(r["status"] == "ok" for r in runs), [r["error"] for r in runs]
    for padding in (4, 32):
        lines = " ".join(document["stacks"][f"encrypted[padding={padding}]"]["mount_lines"])
        assert "contents aes-256-xts, filenames aes-256-cts, padding " + str(padding) in lines, lines
    assert leftovers(scratch) == []


def test_the_top_is_encrypted_and_kill_9_then_clean_leaves_nothing(needs_root: None, tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'name = "x"\nreps = 1\nwarmup = 0\n[stacks.s]\nlayers = [{ kind = "fscrypt", size = "64M" }]\n'
        '[workloads.w]\nkind = "stream-write"\nsize = "1M"\n'
    )
    db, scratch = tmp_path / "r.db", TEST_ROOT / "kill-fscrypt"
    child = start_cli(
        "run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", "--no-namespace",
        env={"LAYERBENCH_STOP_AT": "stack-built"},
    )  # fmt: skip
    try:
        wait_stopped(child)
        top = next(scratch.glob("trials/*/L1-image/encrypted"))
        flags = subprocess.run(["lsattr", "-d", str(top)], capture_output=True, text=True, check=True).stdout
        assert "E" in flags.split()[0], flags  # the directory is under an encryption policy
        assert any("L1-image" in item for item in leftovers(scratch))
    finally:
        child.kill()
        child.communicate(timeout=60)
    done = cli("clean", "--scratch", str(scratch), "--db", str(db))
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stderr
    assert leftovers_after(scratch, 10) == []


def test_a_cipher_the_kernel_lacks_fails_each_run_with_one_line(needs_root: None, tmp_path: Path) -> None:
    if any(line.split(":", 1)[1].strip().startswith("adiantum") for line in _crypto_names()):
        pytest.skip("this kernel has adiantum: no missing cipher to show")
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'name = "x"\nreps = 1\nwarmup = 0\nrerun_disturbed = 0\n[stacks.s]\n'
        'layers = [{ kind = "fscrypt", size = "64M", contents = "adiantum" }]\n'
        '[workloads.w]\nkind = "stream-write"\nsize = "1M"\n'
    )
    db, scratch = tmp_path / "r.db", TEST_ROOT / "fscrypt-adiantum"
    cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet")
    document = json.loads(cli("report", "--db", str(db), "--format", "json", check=True).stdout)
    [run] = document["runs"]
    assert run["status"] == "failed" and "lacks the cipher for contents adiantum" in run["error"], run[
        "error"
    ]
    assert leftovers(scratch) == []


def _crypto_names() -> list[str]:
    return [line for line in Path("/proc/crypto").read_text().splitlines() if line.startswith("name")]
