"""Shared by the tests: running the CLI for real, and what layerbench may leave behind."""

import contextlib
import gc
import io
import json
import math
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
# Each test session gets its own scratch area (removed at its end when nothing of ours is left
# in it), so that two sessions never see, or clean up, each other's roots; the processes the
# tests start inherit it.
SESSIONS_PARENT = Path("/var/tmp/layerbench-tests")
os.environ.setdefault("LAYERBENCH_TEST_ROOT", str(SESSIONS_PARENT / f"s{os.getpid()}"))
TEST_ROOT = Path(os.environ["LAYERBENCH_TEST_ROOT"])


def new_experiment(store: Any, **fields: Any) -> int:
    """An experiment written straight into a store, with the fewest fields a store accepts."""
    defaults: dict[str, Any] = {
        "name": "t",
        "plan_source": "p.toml",
        "plan_text": "",
        "plan": {"stacks": {}},
        "seed": 1,
        "baseline": "a",
        "host": {},
        "version": "0",
        "warnings": [],
    }
    return int(store.create_experiment(**(defaults | fields)))


def experiment_record(**fields: Any) -> Any:
    """A stored experiment's record as the store reads it back, with the fewest fields."""
    from layerbench.store import ExperimentRecord, HostRecord, StoredPlan

    defaults: dict[str, Any] = {
        "id": 1,
        "name": "t",
        "status": "done",
        "plan_source": "p.toml",
        "plan_text": "",
        "plan": {"stacks": {}, "workloads": {}},
        "seed": 1,
        "baseline": "a",
        "started": "2026-12-02T10:00:00+00:00",
        "finished": None,
        "host": {},
        "stacks": {},
        "warnings": [],
        "version": "0",
    }
    record = defaults | fields
    record["plan"] = StoredPlan.model_validate(record["plan"])  # a plan given as the store's JSON
    record["host"] = HostRecord.model_validate(record["host"])  # and the host
    return ExperimentRecord(**record)


def run_row(fill: float = 1, **fields: Any) -> dict[str, Any]:
    """A stored run's row: every registered counter `fill`, one ok run of workload w on stack a."""
    from layerbench.store import run_columns

    row = dict.fromkeys(run_columns(), fill) | {
        "stack": "a",
        "workload": "w",
        "status": "ok",
        "error": None,
        "unit": "bytes",
        "started": "now",
        "warmup": 0,
    }
    return row | fields


def other_loop_scheduler() -> str | None:
    """An I/O scheduler a loop device offers besides the one it has (bfq, kyber or
    mq-deadline: kernels differ in which they have); None when it offers no other."""
    from layerbench.linux import procfs

    for queue in sorted(Path("/sys/block").glob("loop*/queue/scheduler")):
        text = queue.read_text()
        current = text[text.find("[") + 1 : text.find("]")]
        offered = procfs.loop_schedulers() or []
        return next((s for s in ("bfq", "kyber", "mq-deadline") if s in offered and s != current), None)
    return None


# Commands that only read a results file or a plan run in this process, through the same
# main() a user's process runs: a separate process costs some 1.5 s of interpreter start and
# imports (scipy.stats alone 0.7 s) for each of the suite's hundreds of reports. Everything
# that builds, runs, cleans, migrates or is stopped by a signal, and anything given its own
# environment, working directory or a PostgreSQL store (whose server a test may stop: a
# connection left in this process would hold it), still runs as a separate process.
IN_PROCESS = frozenset({"report", "compare", "history", "check", "trend"})


def cli(
    *args: str,
    timeout: float = 900,
    check: bool = False,
    env: dict[str, str] | None = None,
    separate: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[str]:
    """Run `layerbench ARGS` from this checkout: a read-only command in this process (unless
    `separate`), every other one as a separate process."""
    read_only = args[0] in IN_PROCESS and not any("://" in a for a in args)
    if read_only and not separate and env is None and not kwargs and _plain():
        done = _in_process(args)
    else:
        done = subprocess.run(
            [sys.executable, "-m", "layerbench", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**(env or os.environ), "PYTHONPATH": str(REPO)},
            **kwargs,
        )
    if check and done.returncode != 0:
        raise AssertionError(
            f"layerbench {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done


def _plain() -> bool:
    """The CLI's consoles were made without colours, as a separate process's are when its
    output is piped (not so under `pytest -s` on a terminal: those calls run separately)."""
    from layerbench import cli as layerbench_cli

    return layerbench_cli.out.color_system is None and layerbench_cli.console.color_system is None


def _in_process(args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """`layerbench ARGS` through its main() here, its output captured as a process's would be."""
    from layerbench import cli as layerbench_cli

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            returncode = layerbench_cli.main(list(args))
        except SystemExit as exit:  # argparse: a usage error (2), or --help (0)
            returncode = exit.code if isinstance(exit.code, int) else 1
    gc.collect()  # the command's store and its connections go now, as they would at its exit
    argv = ["layerbench", *args]
    return subprocess.CompletedProcess(argv, returncode, stdout.getvalue(), stderr.getvalue())


def start_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start `layerbench ARGS` from this checkout in the background, output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "layerbench", *args],
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_plan(tmp_path: Path, text: str, scratch: Path, *options: str) -> dict[str, Any]:
    """Write the plan (tmp_path/plan.toml), run it quietly into a fresh database
    (tmp_path/r.db); its JSON report."""
    plan, db = tmp_path / "plan.toml", tmp_path / "r.db"
    plan.write_text(text)
    cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", *options, check=True)
    return json.loads(cli("report", "--db", str(db), "--format", "json", check=True).stdout)


def ctrl_c_at(point: str, *args: str) -> None:
    """`layerbench ARGS` stopped at a failpoint, then Ctrl-C: it exits 130 without a traceback."""
    child = start_cli(*args, env={"LAYERBENCH_STOP_AT": point})
    wait_stopped(child)
    child.send_signal(signal.SIGINT)  # delivered once the run goes on
    child.send_signal(signal.SIGCONT)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 130 and "Traceback" not in stderr, stderr


def wait_stopped(child: "subprocess.Popen[Any]", timeout: float = 120) -> None:
    """Wait until a child started with LAYERBENCH_STOP_AT has stopped at its failpoint."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        if child.poll() is not None:
            raise AssertionError(f"run ended before the failpoint: {child.communicate()}")
        time.sleep(0.02)
    raise AssertionError("the failpoint was never reached")


def start_agent(
    requests: list[Any], scratch: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A fleet host's agent as remote.HostAgent starts it: the requests pickled on its stdin,
    which is then closed (the experiment is over once they are answered). The process returned
    is the agent's guard; the agent that builds and runs is its child (stopped_agent())."""
    child = subprocess.Popen(
        [sys.executable, "-m", "layerbench.fleet.agent", "--host", "here", "--scratch", str(scratch)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )
    assert child.stdin is not None
    child.stdin.write(b"".join(pickle.dumps(request) for request in requests))
    child.stdin.close()
    child.stdin = None  # sent: communicate() must not write to it again
    return child


def stopped_agent(guard: "subprocess.Popen[bytes]", timeout: float = 120) -> int:
    """The pid of the agent behind guard (see fleet.agent._behind_a_guard) once it has stopped
    at its failpoint. The guard may have had other, short-lived children (its imports run a
    tool or two) before it forked the agent: the agent is the one that stops."""
    deadline = time.monotonic() + timeout
    children = Path(f"/proc/{guard.pid}/task/{guard.pid}/children")
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            for child in children.read_text().split():
                if Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T":
                    return int(child)
        if guard.poll() is not None:
            raise AssertionError(f"the agent ended before the failpoint: {guard.communicate()}")
        time.sleep(0.02)
    raise AssertionError("the agent never reached its failpoint")


def agent_answers(stdout: bytes) -> list[Any]:
    """Every answer an agent wrote: its readiness first, then one per request."""
    stream, answers = io.BytesIO(stdout), []
    while stream.tell() < len(stdout):
        answers.append(pickle.load(stream))
    return answers


def leftovers_after(root: Path, seconds: float) -> list[str]:
    """What is still left under root once the kernel has had up to seconds to drop a killed
    run's namespace (its mounts and autoclear loop devices go asynchronously)."""
    deadline = time.monotonic() + seconds
    while (found := leftovers(root)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def leftovers(root: Path) -> list[str]:
    """Mounts, loop devices, control groups and helper processes (FUSE daemons, VMs,
    chrooted builds) that reference root, seen from the host."""
    prefix = str(root).rstrip("/") + "/"
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = line.split()[4].replace("\\040", " ")
        if (mount_point + "/").startswith(prefix):
            found.append(f"mount {mount_point}")
    for loop in Path("/sys/block").glob("loop*"):
        try:
            backing = (loop / "loop" / "backing_file").read_text().strip()
        except OSError:
            continue  # not bound, or detached while we looked (others use loop devices too)
        if backing.startswith(prefix):
            found.append(f"loop device {loop.name} -> {backing}")
    # Our control groups: under a `layerbench` parent in any cgroup tree, named after the
    # scratch root with '/' as '%'.
    owner = str(root).strip("/").replace("/", "%") + "%"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        if " - cgroup" not in line:
            continue
        parent = Path(line.split()[4]) / "layerbench"
        if parent.is_dir():
            found += [f"cgroup {group}" for group in parent.iterdir() if group.name.startswith(owner)]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if prefix.rstrip("/") in cmdline and re.search(r"bindfs|qemu-system|fuse|chroot|sshd|sshfs", cmdline):
            found.append(f"process {proc.name}: {cmdline.strip()}")
    return found


AGENT_MODULE = "layerbench.fleet.agent"


def fleet_agents(root: Path) -> list[int]:
    """The fleet agents (and their guards, which have the same command line) whose scratch
    root lies under root: a test's own, never another run's. Others run beside a test on the
    same machine (another checkout's fleet tests, the recovery stress harness's agent cases),
    and an agent found by its module name alone was one of them as often as one of ours."""
    prefix = str(root).rstrip("/") + "/"
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0")]
        except OSError:
            continue
        if AGENT_MODULE not in argv:
            continue
        scratch = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--scratch"), "")
        if (scratch.rstrip("/") + "/").startswith(prefix):
            found.append(int(proc.name))
    return sorted(found)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """Assert a bad-input failure: exit 2, exactly one line, no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with a throwaway profile under the test root."""
    TEST_ROOT.mkdir(parents=True, exist_ok=True)  # the first test of a session may need it
    profile = tempfile.mkdtemp(prefix="chromium-", dir=TEST_ROOT)
    try:
        return subprocess.run(
            [
                shutil.which("chromium") or "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                f"--user-data-dir={profile}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)


_MEASURE_FIGURES = """<script>
for (const f of document.querySelectorAll('.figure')) {
  const box = f.querySelector('svg').getBoundingClientRect();
  f.setAttribute('data-drawn', Math.round(box.width) + 'x' + Math.round(box.height));
}</script></body>"""


def drawn_figures(page: Path, work: Path) -> tuple[dict[str, tuple[int, int]], str]:
    """Render an HTML report in headless Chromium and ask the page how large each figure
    is drawn: (figure id -> (width, height) in pixels, the rendered DOM)."""
    probe = work / "probe.html"
    probe.write_text(page.read_text().replace("</body>", _MEASURE_FIGURES))
    dom = chromium("--dump-dom", f"file://{probe}").stdout
    found = re.findall(r"id=\"([\w-]+)\" data-drawn=\"(\d+)x(\d+)\"", dom)
    return {name: (int(w), int(h)) for name, w, h in found}, dom


def skip_unless_root(needs: str = "mounts, loop devices and drop_caches") -> None:
    """Skip the test (or a fixture's tests), saying what it needs root for, unless run as root."""
    if os.geteuid() != 0:
        pytest.skip(f"needs root: {needs} (run the suite as root)")


def vm_capable() -> None:
    """Skip, saying why, where this host cannot run the vm layer (root, qemu, a guest kernel)."""
    skip_unless_root()
    from layerbench.stacks.vm import VmLayer

    lacks = VmLayer.missing(VmLayer.Options(kind="vm"))
    if lacks:
        pytest.skip(f"this host cannot run the vm layer: {lacks[0]}")


def assert_verdict_agrees(row: Mapping[str, Any]) -> None:
    """A report's row says what its interval says: slower or faster exactly when the interval
    at the decision's level excludes 1; an equivalent row shows the two one-sided tests'
    interval (at 1 - 2 alpha) within the margin, which may miss 1 ("2% to 8% slower":
    stats.decide). An unbounded end is written as null (JSON has no infinity)."""
    low = row["ratio_ci_low"]
    high = math.inf if row["ratio_ci_high"] is None else row["ratio_ci_high"]
    if row["decision"] == "equivalent":
        margin = row["equivalence"]
        assert 1 - margin <= low <= high <= 1 + margin, row
    else:
        assert (low > 1 or high < 1) == (row["decision"] in ("slower", "faster")), row
