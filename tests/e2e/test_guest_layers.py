"""Layers this host's kernel lacks, built inside a vm layer's guest, for real: dm-crypt on an
LVM thin volume on md RAID1 in one guest (each layer's own counters: the mapping's writes,
the pool's growth, both members' writes), a thin snapshot taken before the run, NFSv4.2
over the guest's loopback, a cipher the
guest's kernel lacks as a failed run with cryptsetup's reason, and nothing left behind (the
vm layer's 9p share: test_vm.py). One guest boot per stack (tcg: some 25 s each)."""

import json
import re
import signal
import time
from pathlib import Path

import pytest
from helpers import TEST_ROOT, cli, leftovers, run_plan, start_cli, vm_capable

pytestmark = pytest.mark.e2e

GUEST = '{ kind = "vm", cpus = 1, memory = "512M", disk_size = "1G" }'
STACKED = (
    '{ kind = "md-raid1", size = "512M" }, { kind = "lvm-thin", size = "256M", pool_size = "256M" }, '
    '{ kind = "dm-crypt", size = "128M", no_write_workqueue = true }'
)
THIN_SNAPSHOT = '{ kind = "lvm-thin", size = "256M", pool_size = "256M", snapshot = true }'
# NFS served from the thin volume (one guest boot for both): its sync export makes each
# direct write over NFS stable on the volume within the run.
NFS = '{ kind = "nfs", vers = "4.2", wsize = "64K" }'
JOB_BYTES = 2 * 2**20  # NFS's sync writes take some 11-21 ms each under tcg: 6-11 s for these
# One job for every stack: JOB_BYTES laid out (written) untimed, then overwritten at random,
# 4 KiB direct writes, so that the timed writes land on blocks a thin snapshot shares.
PLAN = f"""
name = "guest-layers"
reps = 1
rerun_disturbed = 0  # the run counts below are exact
warmup = 0
baseline = "guest-stacked"
[stacks.guest-stacked]
layers = [{GUEST}, {STACKED}]
[stacks.guest-thin-snapshot-nfs]
layers = [{GUEST}, {THIN_SNAPSHOT}, {NFS}]
[stacks.guest-serpent]
layers = [{GUEST}, {{ kind = "dm-crypt", size = "128M", cipher = "serpent-xts-plain64" }}]
[workloads.overwrite]
kind = "fio"
[workloads.overwrite.options]
rw = "randwrite"
bs = "4k"
size = "{JOB_BYTES >> 20}M"
overwrite = 1
ioengine = "psync"
direct = 1
end_fsync = 1
"""


@pytest.fixture(scope="module")
def guest_layers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    vm_capable()
    base = tmp_path_factory.mktemp("guest-layers")
    plan = base / "plan.toml"
    plan.write_text(PLAN)
    db = base / "results.db"
    scratch = TEST_ROOT / "guest-layers"
    done = cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet")
    after = leftovers(scratch)
    report = json.loads(cli("report", "--db", str(db), "--format", "json", check=True).stdout)
    return {"returncode": done.returncode, "stderr": done.stderr, "json": report, "leftovers": after}


def _runs(guest_layers: dict[str, object]) -> dict[str, dict[str, object]]:
    document = guest_layers["json"]
    assert isinstance(document, dict)
    return {run["stack"]: run for run in document["runs"]}


def test_each_guest_layer_of_a_stack_counts_its_own_part(guest_layers: dict[str, object]) -> None:
    run = _runs(guest_layers)["guest-stacked"]
    assert run["status"] == "ok", run["error"]
    facts = run["facts"]
    assert isinstance(facts, dict)
    lines = facts["guest"]["mount_lines"]
    luks = next(line for line in lines if "LUKS2" in line)
    assert "aes-xts-plain64, 512-bit key (random), 4096-byte sectors, no_write_workqueue" in luks
    mirror = next(line for line in lines if "md RAID1 of" in line)
    assert "--assume-clean" in mirror
    devices = run["devices"]
    assert isinstance(devices, dict)
    # dm-crypt's mapping is the top device: the 2 MiB went through it...
    top = next(name for name in devices if name.startswith("guest:"))
    assert top.startswith("guest:dm-") and devices[top]["write_bytes"] >= JOB_BYTES, devices
    # ...and, below the thin volume, md wrote every block to both members.
    members = re.findall(r"/dev/(loop\d+)", mirror.split("[")[0])
    assert len(members) == 2, mirror
    assert all(devices[f"guest:{m}"]["write_bytes"] >= JOB_BYTES for m in members), devices
    # Without a snapshot the overwrites stay in the thin volume's chunks: the pool barely grows.
    grown = (facts["thin_pool_used_after"] - facts["thin_pool_used_before"]) * 256 * 2**20
    assert 0 <= grown <= 0.25 * JOB_BYTES, grown
    assert "thin_snapshot" not in facts


def test_a_thin_snapshot_before_the_run_makes_its_overwrites_take_new_chunks(
    guest_layers: dict[str, object],
) -> None:
    """Overwriting 2 MiB of a 256 MiB pool after a snapshot (through NFS served from the
    thin volume): every 64 KiB chunk the random 4 KiB writes touch is copied to a new one
    first."""
    run = _runs(guest_layers)["guest-thin-snapshot-nfs"]
    assert run["status"] == "ok", run["error"]
    facts = run["facts"]
    assert isinstance(facts, dict)
    assert facts["thin_snapshot"].endswith(
        "/before-run of " + facts["thin_snapshot"].split("/")[0] + "/volume"
    )
    grown = (facts["thin_pool_used_after"] - facts["thin_pool_used_before"]) * 256 * 2**20
    assert grown >= 0.8 * JOB_BYTES, grown


def test_nfs_in_the_guest_sends_every_direct_write_to_its_own_server(guest_layers: dict[str, object]) -> None:
    """NFSv4.2 over the guest's loopback, served by an nfsd of the trial's own: each 4 KiB
    direct write is one WRITE call (512 for 2 MiB), counted by the client over the timed
    run, none sent twice; the mount carries the options asked for."""
    run = _runs(guest_layers)["guest-thin-snapshot-nfs"]
    assert run["status"] == "ok", run["error"]
    facts = run["facts"]
    assert isinstance(facts, dict)
    assert JOB_BYTES // 4096 <= facts["nfs_rpc_calls"] <= JOB_BYTES // 4096 + 64, facts["nfs_rpc_calls"]
    assert facts["nfs_retransmissions"] == 0
    lines = facts["guest"]["mount_lines"]
    client = next(line for line in lines if " type nfs4 " in line)
    assert "vers=4.2" in client and "wsize=65536" in client and "127.0.0.1:/" in client, client
    server = next(line for line in lines if line.startswith("nfsd "))
    assert "rw,sync,no_subtree_check" in server and "own network namespace" in server, server
    # nfsdcld tells the new server it has no clients to reclaim: no 10 s grace before the run.
    assert "NFSv4 grace period skipped" in server, server


def test_a_cipher_the_guest_lacks_is_a_failed_run_with_the_reason(guest_layers: dict[str, object]) -> None:
    serpent = _runs(guest_layers)["guest-serpent"]
    assert serpent["status"] == "failed"
    error = serpent["error"]
    assert isinstance(error, str) and "cryptsetup" in error and "serpent" in error, error
    assert "\n" not in error.strip() and "Traceback" not in error


def test_nothing_is_left_after_the_guest_layers(guest_layers: dict[str, object]) -> None:
    assert guest_layers["leftovers"] == []


def test_dm_crypt_on_this_host_is_refused_in_one_line(tmp_path: Path) -> None:
    """This host's kernel has no device-mapper: a dm-crypt layer not above a vm layer is
    refused before anything is built, naming the module and where it can run."""
    from layerbench.linux import procfs

    if procfs.kernel_has_module("dm_mod"):
        pytest.skip("this host's kernel has device-mapper: the layer would be built here")
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'name = "crypt"\nreps = 1\n[stacks.crypt]\nlayers = [{ kind = "dm-crypt", size = "128M" }]\n'
        '[workloads.w]\nkind = "command"\nrun = "true"\n'
    )
    done = cli("run", str(plan), "--db", str(tmp_path / "r.db"), "--scratch", str(TEST_ROOT / "crypt-host"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "layer dm-crypt needs the kernel module dm_mod" in done.stderr
    assert "above a vm layer" in done.stderr


def test_ctrl_c_while_the_guest_layers_are_up_leaves_nothing(tmp_path: Path) -> None:
    """NFS over dm-crypt on an LVM thin volume on md RAID1 in a guest, churned through the
    guest's automounter for two minutes, stopped by Ctrl-C: the guest goes, and with it its
    automount daemon, NFS server, arrays and mappings; nothing of the trial is left on this
    host (a kill -9 and `clean` of a guest: test_vm.py). The Ctrl-C comes 3 s into the
    timed churn."""
    vm_capable()
    plan = tmp_path / "plan.toml"
    stacked = STACKED.replace('pool_size = "256M"', 'pool_size = "256M", snapshot = true')
    layers = [GUEST, stacked, '{ kind = "nfs" }']
    plan.write_text(
        'name = "stopped"\nreps = 1\nwarmup = 0\nrerun_disturbed = 0\n'
        f"[stacks.s]\nlayers = [{', '.join(layers)}]\n"
        '[workloads.w]\nkind = "churn"\nthrough = "automount"\nentries = 2\nduration = 120\n'
    )
    scratch = TEST_ROOT / "guest-layers-stopped"
    child = start_cli("run", str(plan), "--db", str(tmp_path / "r.db"), "--scratch", str(scratch), "--quiet")
    deadline = time.monotonic() + 300
    # The host writes "go" into the guest's share once the guest is booted, its layers built
    # (NFSv4's grace period skipped) and its counters read: the timed churn starts there.
    while not list(scratch.glob("trials/**/L1-vm-share/go")):
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the guest's run never started"
        time.sleep(0.2)
    time.sleep(3)  # the churn under way: its daemon started, its first lookups mounting
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert leftovers(scratch) == []


def test_churn_through_the_automounter_over_nfs_in_a_guest(tmp_path: Path) -> None:
    """Seed 1's proof, small: a trial's own automount daemon in the guest mounts NFSv3 from
    the guest's own server for each of 2 keys and expires them, 4 rounds: 8 cycles, none
    failed, none left mounted, the slab growth reported, and nothing left on this host
    (examples/netbsd-churn.toml --quick runs 160)."""
    vm_capable()
    plan = (
        'name = "automount"\nreps = 1\nwarmup = 0\nrerun_disturbed = 0\n'
        f'[stacks.nfs]\nlayers = [{GUEST}, {{ kind = "nfs", vers = "3" }}]\n'
        '[workloads.churn]\nkind = "churn"\nthrough = "automount"\nentries = 2\ncycles = 8\nfiles = 1\n'
    )
    scratch = TEST_ROOT / "guest-automount"
    (run,) = run_plan(tmp_path, plan, scratch)["runs"]  # exits 0, or says how it did not
    assert run["status"] == "ok", run["error"]
    churn = run["facts"]["churn"]
    assert churn["through"] == "automount"
    assert (churn["cycles"], churn["failures"], churn["leaked_mounts"]) == (8, 0, 0), churn["errors"]
    assert churn["mount_s"]["p50"] > 0 and churn["unmount_s"]["p50"] > 0
    assert isinstance(churn["slab_kib_growth"], int) and isinstance(churn["slab_kib_per_1000_cycles"], float)
    assert churn["kernel_log"]["checked"] and churn["kernel_log"]["alarms"] == 0, churn["kernel_log"]
    assert leftovers(scratch) == []


def test_churn_through_the_automounter_on_a_kernel_without_autofs_says_so(tmp_path: Path) -> None:
    from layerbench.linux import procfs

    if procfs.kernel_has_filesystem("autofs"):
        pytest.skip("this host's kernel has autofs: the churn would run here")
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'name = "automount-host"\nreps = 1\nwarmup = 0\nrerun_disturbed = 0\n'
        '[stacks.bind]\nlayers = [{ kind = "bind" }]\n'
        '[workloads.churn]\nkind = "churn"\nthrough = "automount"\ncycles = 4\n'
    )
    db, scratch = tmp_path / "r.db", TEST_ROOT / "host-automount"
    cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet")
    report = json.loads(cli("report", "--db", str(db), "--format", "json", check=True).stdout)
    (run,) = report["runs"]
    assert run["status"] == "failed"
    assert "this kernel has no autofs" in run["facts"]["churn"]["errors"][0]
    assert leftovers(scratch) == []
