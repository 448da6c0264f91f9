"""The sshfs layer for real: an sshd of the trial's own on loopback, reached only with the
trial's key; writes and metadata through it; nothing left after a run or after kill -9 and
clean, and the host's /run untouched."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import TEST_ROOT, cli, leftovers, leftovers_after, run_plan, start_cli, wait_stopped

pytestmark = pytest.mark.e2e

PLAN = """
name = "sshfs"
reps = 1
warmup = 0
rerun_disturbed = 0
baseline = "ram"
[stacks.ram]
layers = [{ kind = "tmpfs", size = "64M" }]
[stacks.ssh]
layers = [{ kind = "tmpfs", size = "64M" }, { kind = "sshfs", cipher = "aes128-gcm@openssh.com" }]
[workloads.write]
kind = "stream-write"
size = "8M"
[workloads.files]
kind = "metadata"
files = 100
"""


@pytest.fixture(autouse=True)
def _needs_ssh() -> None:
    missing = [tool for tool in ("sshfs", "ssh", "ssh-keygen", "/usr/sbin/sshd") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (deps/apt.txt has openssh-server, sshfs)")


LOOPBACK, ANY = "0100007F", "00000000"


def _tcp_ports(state: str, address: str = LOOPBACK) -> set[int]:
    """Local IPv4 ports bound to address in a TCP state (0A: listening, 01: established)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, _, st = line.split()[1:4]
        bound, port = local.split(":")
        if st == state and bound == address:
            found.add(int(port, 16))
    return found


def test_writes_and_metadata_over_ssh_leave_nothing(needs_root: None, tmp_path: Path) -> None:
    had_run_sshd = Path("/run/sshd").exists()
    scratch = TEST_ROOT / "sshfs"
    document = run_plan(tmp_path, PLAN, scratch)
    runs = document["runs"]
    assert len(runs) == 4 and all(r["status"] == "ok" for r in runs), [r["error"] for r in runs]
    over_ssh = [r for r in runs if r["stack"] == "ssh"]
    # The ssh client and server do the crypto: their CPU is the layer's, and it was counted,
    # in nanoseconds by their control group (a clock tick of /proc/PID/stat is 10 ms, more
    # than a 100-file run's helpers may use: it once read 0.0 here).
    assert all(r["facts"].get("helper_cpu_source") == "cgroup" for r in over_ssh), [
        r["facts"] for r in over_ssh
    ]
    assert all(r["helper_cpu_s"] > 0 for r in over_ssh), [r["helper_cpu_s"] for r in over_ssh]
    line = " ".join(document["stacks"]["ssh"]["mount_lines"])
    assert " fuse.sshfs " in line and "root@127.0.0.1:" in line and "Ciphers=aes128-gcm@openssh.com" in line
    assert leftovers(scratch) == []
    assert Path("/run/sshd").exists() == had_run_sshd  # sshd's /run was its own


def test_the_server_listens_on_loopback_for_the_trials_key_only(needs_root: None, tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'name = "sshfs-kill"\nreps = 1\nwarmup = 0\n[stacks.ssh]\n'
        'layers = [{ kind = "tmpfs", size = "64M" }, { kind = "sshfs" }]\n'
        '[workloads.write]\nkind = "stream-write"\nsize = "1M"\n'
    )
    db, scratch = tmp_path / "r.db", TEST_ROOT / "kill-sshfs"
    listening_before = _tcp_ports("0A")
    child = start_cli(
        "run",
        str(plan),
        "--db",
        str(db),
        "--scratch",
        str(scratch),
        "--quiet",
        "--no-namespace",
        env={"LAYERBENCH_STOP_AT": "stack-built"},
    )
    try:
        wait_stopped(child)
        config = next(scratch.glob("trials/*/L2-ssh/sshd_config"))
        port = int(re.search(r"ListenAddress 127\.0\.0\.1:(\d+)", config.read_text())[1])  # type: ignore[index]
        assert port in _tcp_ports("0A") - listening_before
        assert port not in _tcp_ports("0A", ANY)
        assert not any(
            f":{int(line.split()[1].split(':')[1], 16)}" == f":{port}" for line in _tcp6_listening()
        )
        stranger = tmp_path / "stranger"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
        strict = [  # a stranger's key, and no questions asked
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
        ]
        refused = subprocess.run(
            ["ssh", "-F", "/dev/null", "-i", str(stranger), "-p", str(port), *strict, "root@127.0.0.1", "id"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused.stderr
        assert any("sshd" in item for item in leftovers(scratch)) and any(
            "sshfs" in i for i in leftovers(scratch)
        )
    finally:
        child.kill()
        child.communicate(timeout=60)
    done = cli("clean", "--scratch", str(scratch), "--db", str(db))
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stderr
    assert leftovers_after(scratch, 10) == []
    assert port not in _tcp_ports("0A") | _tcp_ports("01")  # no server, and no session left


def _tcp6_listening() -> list[str]:
    lines = Path("/proc/net/tcp6").read_text().splitlines()[1:] if Path("/proc/net/tcp6").exists() else []
    return [line for line in lines if line.split()[3] == "0A"]
