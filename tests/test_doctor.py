"""The doctor's checks on this very host: what it says must match what is here."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from helpers import cli

from layerbench.observe.busy import BusyWindow
from layerbench.plan import parse_plan
from layerbench.selftest import doctor

BIG = """
name = "big"
[stacks.disk]
layers = []
[stacks.image]
layers = [{ kind = "image", size = "100T" }]
[workloads.write]
kind = "stream-write"
size = "1G"
fill = "2G"
"""


def test_every_check_has_a_status_and_a_fix_when_not_ok(scratch_root: Path) -> None:
    checks = doctor.diagnose(scratch_root, None, probe=False)
    names = {c.name for c in checks}
    assert {
        "root",
        "loop devices",
        "overlay",
        "tmpfs",
        "fuse",
        "9p",
        "kvm",
        "tool fio",
        "tool losetup",
        "tool tar",
        "tool qemu-system-x86_64",
        "space",
        "busy processes",
        "load",
        "swap",
        "CPU governor",
        "THP",
    } <= names
    for check in checks:
        assert check.status in ("ok", "warn", "fail", "info")
        if check.status in ("warn", "fail"):
            assert check.fix, check


def test_kvm_is_described_truthfully() -> None:
    check = doctor.check_kvm()
    if Path("/sys/module/kvm_pvm").is_dir():
        # This host's /dev/kvm is a paravirtual nested KVM: a stock guest kernel cannot run.
        assert check.status == "warn" and "kvm_pvm" in check.detail and "tcg" in check.detail
    elif not Path("/dev/kvm").exists():
        assert check.status == "warn" and "tcg" in check.detail
    else:
        assert check.status in ("ok", "warn")


def test_kernel_features_match_proc_filesystems() -> None:
    listed = Path("/proc/filesystems").read_text()
    by_name = {c.name: c for c in doctor.check_kernel_features()}
    for fs in ("overlay", "tmpfs"):
        if f"\t{fs}\n" in listed:
            assert by_name[fs].status == "ok"
    assert (by_name["loop devices"].status == "ok") == Path("/dev/loop-control").exists()


def test_space_against_a_plan_that_cannot_fit(scratch_root: Path) -> None:
    plan = parse_plan(BIG, "big.toml")
    # The sparse image holds what is written (3G), and mkfs.ext4 writes its inode tables
    # (1/64 of the size) and a journal of 1G at once.
    assert doctor.plan_needs_bytes(plan) == 100 * 2**40 // 64 + 2**30 + 3 * 2**30
    check = doctor.check_space(scratch_root, plan)
    assert check.status == "fail" and "needs up to 1.6T" in check.detail and check.fix
    # run shows it at its start, among the cheap warnings.
    assert any(line.startswith("doctor: space:") for line in doctor.warnings_before_run(scratch_root, plan))


def test_swap_and_thp_read_the_kernel() -> None:
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    swap_used = int(meminfo["SwapTotal"].split()[0]) - int(meminfo["SwapFree"].split()[0])
    assert (doctor.check_swap().status == "warn") == (swap_used > 0)
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists():
        assert (doctor.check_thp().status == "warn") == ("[always]" in thp.read_text())


def test_idle_write_probe(needs_root: None, scratch_root: Path) -> None:
    check = doctor.check_idle_write(scratch_root)
    assert check.status in ("ok", "warn"), check
    speeds = [float(v) for v in check.detail.split("at once: ")[1].split(" MB/s")[0].split(", ")]
    assert len(speeds) == 3 and all(s > 0 for s in speeds)
    if check.status == "warn":
        assert "warm-up is required" in check.detail and speeds[0] * doctor.SLOW_FIRST_WRITE <= max(
            speeds[1:]
        )
    assert not (scratch_root / "doctor").exists()


def test_cli_json(scratch_root: Path) -> None:
    done = cli("doctor", "--quick", "--scratch", str(scratch_root), "--format", "json")
    checks = json.loads(done.stdout)["checks"]
    failed = [c for c in checks if c["status"] == "fail"]
    assert done.returncode == (1 if failed else 0), done.stderr
    assert os.geteuid() != 0 or not any(c["name"] == "root" for c in failed)
    assert not any(c["name"] == "first write after idle" for c in checks)  # --quick skips the probe


def test_cli_bad_plan(tmp_path: Path) -> None:
    from helpers import one_line_error

    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[stacks.a]\nlayers = [{ kind = "nope" }]\n[workloads.w]\nkind = "metadata"\n')
    assert "bad.toml" in one_line_error(cli("doctor", str(bad), "--quick"))


def test_busy_processes_excludes_itself() -> None:
    window = BusyWindow()
    began = time.monotonic()
    while time.monotonic() - began < 0.2:  # this process on a CPU for the whole window
        pass
    assert os.getpid() not in [pid for _, pid, _ in window.busy(0.0, window_s=0.2)]


def test_a_busy_window_opened_at_the_runs_start_waits_only_for_the_rest_and_sees_a_busy_process() -> None:
    """run opens the window as it starts: by the check, most of it has passed."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.1)  # the spinner is in the window's first reading
        window = BusyWindow()
        time.sleep(0.4)  # the run's startup
        began = time.monotonic()
        check = doctor.check_busy_processes(window)
        waited = time.monotonic() - began
    finally:
        spinner.kill()
        spinner.wait()
    # 0.1 s of window left; the rest is reading /proc twice (generous on a loaded machine)
    assert waited < 0.35, waited
    # a process spinning on a CPU for the whole window: well above the share, even beside another
    assert check.status == doctor.WARN and f"pid {spinner.pid}," in check.detail, check.detail


def test_the_entry_point_opens_the_busy_window_before_the_clis_imports() -> None:
    """`python3 -m layerbench` and the `layerbench` script: one window, opened before the
    CLI is imported (its imports fill most of the half second a run's check looks at)."""
    code = (
        "import sys\n"
        "import layerbench.__main__ as entry\n"
        "seen = []\n"
        "class Window(entry.BusyWindow):\n"
        "    def __init__(self):\n"
        "        seen.append('layerbench.cli' in sys.modules)\n"
        "        super().__init__()\n"
        "entry.BusyWindow = Window\n"
        "sys.argv = ['layerbench', '--version']\n"
        "try:\n"
        "    entry.run()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(seen)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "[False]", done.stdout + done.stderr
