"""The vm layer for real: a qemu guest (tcg here) running the workload and the layers above
it, counters from inside the guest and from the host, and no qemu left behind after a run,
a Ctrl-C, or a kill -9 followed by `clean`."""

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import TEST_ROOT, cli, leftovers, leftovers_after, start_cli, vm_capable

pytestmark = pytest.mark.e2e

PLAN = """
name = "vm-e2e"
reps = 1
rerun_disturbed = 0  # the run counts below are exact
warmup = 0
baseline = "native"
[stacks.native]
layers = [{ kind = "image", fs = "ext4", size = "256M" }]
[stacks.vm-bind]
layers = [
    { kind = "vm", cpus = 1, memory = "512M", disk_size = "512M", bus = "virtio-scsi" },
    { kind = "bind" },
]
[stacks.vm-9p]
layers = [{ kind = "vm", cpus = 1, memory = "512M", disk_size = "512M", share = "9p" }]
[workloads.write]
kind = "stream-write"
size = "16M"
"""

# fio in a guest: the same trial procedure as on the host, so the same figures (IOPS, latency
# percentiles, bytes claimed durable by end_fsync).
FIO_PLAN = """
name = "vm-fio"
reps = 1
rerun_disturbed = 0
warmup = 0
baseline = "native"
[stacks.native]
layers = [{ kind = "image", fs = "ext4", size = "256M" }]
[stacks.vm]
layers = [{ kind = "vm", cpus = 1, memory = "512M", disk_size = "512M", cache = "none" }]
[workloads.mix]
kind = "fio"
[workloads.mix.options]
rw = "randrw"
rwmixread = 70
bs = "4k"
size = "8M"
ioengine = "psync"
direct = 1
end_fsync = 1
"""

SLOW_PLAN = """
name = "vm-slow"
reps = 3
rerun_disturbed = 0  # the run counts below are exact
warmup = 0
[stacks.vm]
layers = [{ kind = "vm", memory = "512M", disk_size = "256M" }]
[workloads.cmd]
kind = "command"
run = "sleep 60"
"""


@pytest.fixture(scope="module")
def vm_experiment(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    vm_capable()
    base = tmp_path_factory.mktemp("vm")
    plan = base / "plan.toml"
    plan.write_text(PLAN)
    db = base / "results.db"
    scratch = TEST_ROOT / "vm-run"
    done = cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet")
    assert done.returncode == 0, done.stderr
    after = leftovers(scratch)
    report = json.loads(cli("report", "--db", str(db), "--format", "json", check=True).stdout)
    text = cli("report", "--db", str(db), check=True).stdout
    mail = cli("report", "--db", str(db), "--format", "mail", check=True).stdout
    return {"json": report, "text": text, "mail": mail, "leftovers": after}


def test_vm_runs_in_the_guest_with_guest_and_host_counters(vm_experiment: dict[str, object]) -> None:
    document = vm_experiment["json"]
    assert isinstance(document, dict)
    runs = {r["stack"]: r for r in document["runs"]}
    assert {run["status"] for run in runs.values()} == {"ok"}, [r["error"] for r in runs.values()]
    # virtio-scsi here; virtio-blk in the fio test below and tests/e2e/test_guest_layers.py
    for stack in ("vm-bind",):
        run = runs[stack]
        guest = run["facts"]["guest"]
        assert guest["accel"] in ("kvm", "tcg")
        assert guest["counters_from"].startswith("guest:")
        # Counters from inside the guest: its own disk wrote the 16 MiB, its dd was timed there.
        guest_disk = run["devices"]["guest:sda"]
        assert guest_disk["write_bytes"] >= 16 * 2**20
        assert run["write_bytes"] == guest_disk["write_bytes"]
        assert any(name.startswith("host:") for name in run["devices"])
        assert run["helper_cpu_s"] > 0, "the qemu process's CPU time on the host"
        # The guest's clock agrees with the host's around the timed run.
        assert run["wall_s"] <= guest["host_wall_s"] + 0.05
        assert run["wall_s"] > 0.3 * guest["host_wall_s"]
    assert any("bind" in line for line in runs["vm-bind"]["facts"]["guest"]["mount_lines"])
    assert runs["native"]["facts"].get("guest") is None


def test_a_9p_share_puts_the_workloads_writes_on_the_hosts_disk_not_the_guests(
    vm_experiment: dict[str, object],
) -> None:
    document = vm_experiment["json"]
    assert isinstance(document, dict)
    run = next(r for r in document["runs"] if r["stack"] == "vm-9p")
    # The 16 MiB written and synced in the guest reached this host's disk through qemu; the
    # guest's own disk carried none of it.
    assert run["devices"]["host:vda"]["write_bytes"] >= 16 * 2**20, run["devices"]
    assert run["devices"].get("guest:vda", {"write_bytes": 0})["write_bytes"] < 4 * 2**20, run["devices"]
    assert "over 9p (msize=512000,cache=none)" in " ".join(document["stacks"]["vm-9p"]["mount_lines"])


def test_the_accelerator_is_recorded_and_reported(vm_experiment: dict[str, object]) -> None:
    document = vm_experiment["json"]
    assert isinstance(document, dict)
    accel = next(r["facts"]["guest"]["accel"] for r in document["runs"] if "guest" in r["facts"])
    assert f"accel={accel}" in document["stacks"]["vm-bind"]["layers"][0]
    assert f"accel {accel}" in document["stacks"]["vm-bind"]["mount_lines"][0]
    # tcg runs nothing speculatively: its guest boots without the mitigations; KVM's keeps them
    said = "mitigations off" in document["stacks"]["vm-bind"]["mount_lines"][0]
    assert said == (accel == "tcg"), document["stacks"]["vm-bind"]["mount_lines"][0]
    for report in (vm_experiment["text"], vm_experiment["mail"], json.dumps(document["warnings"])):
        assert isinstance(report, str)
        assert f"accelerator {accel}" in report
        assert "counted inside the guest" in report
        if accel == "tcg":
            assert "emulation, not hypervisor, overhead" in report


def test_no_qemu_after_a_run(vm_experiment: dict[str, object]) -> None:
    assert vm_experiment["leftovers"] == []


def test_fio_in_a_vm_reports_iops_latency_and_durability_like_the_host(tmp_path: Path) -> None:
    vm_capable()
    plan = tmp_path / "plan.toml"
    plan.write_text(FIO_PLAN)
    db = tmp_path / "r.db"
    scratch = TEST_ROOT / "vm-fio"
    done = cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet")
    assert done.returncode == 0, done.stderr
    assert leftovers(scratch) == []
    document = json.loads(cli("report", "--db", str(db), "--format", "json", check=True).stdout)
    runs = {r["stack"]: r for r in document["runs"]}
    assert {run["status"] for run in runs.values()} == {"ok"}, [r["error"] for r in runs.values()]
    for stack in ("native", "vm"):
        run = runs[stack]
        for direction in ("read", "write"):
            assert run[f"{direction}_iops"] > 0, (stack, direction)
            assert run[f"{direction}_clat_p99_ns"] > 0, (stack, direction)
        assert run["fio_runtime_s"] > 0 and run["facts"]["fio_jobs"], stack
        # end_fsync: the bytes fio wrote are claimed durable and reached the bottom device.
        durability = run["facts"]["durability"]
        assert durability["claimed_bytes"] == run["write_io_bytes"] and durability["durable"], durability
    assert "guest" in runs["vm"]["facts"] and "guest" not in runs["native"]["facts"]
    text = cli("report", "--db", str(db), check=True).stdout
    assert "read IOPS" in text or "read_iops" in text, text


def _start_slow(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], Path, Path]:
    scratch = TEST_ROOT / f"vm-interrupt-{tmp_path.name}"
    db = tmp_path / "r.db"
    plan = tmp_path / "plan.toml"
    plan.write_text(SLOW_PLAN)
    child = start_cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", *extra)
    deadline = time.monotonic() + 300
    while not any("qemu-system" in item for item in leftovers(scratch)):
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "no guest started"
        time.sleep(0.1)
    time.sleep(5)  # into the boot
    return child, scratch, db


def test_ctrl_c_stops_the_guest(tmp_path: Path) -> None:
    vm_capable()
    child, scratch, _ = _start_slow(tmp_path)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert leftovers(scratch) == []


def test_kill_9_then_clean_leaves_no_guest(tmp_path: Path) -> None:
    vm_capable()
    child, scratch, db = _start_slow(tmp_path, "--no-namespace")
    child.kill()
    child.communicate(timeout=60)
    done = cli("clean", "--scratch", str(scratch), "--db", str(db), check=True)
    assert "marked interrupted" in done.stdout
    assert leftovers_after(scratch, 10) == []
