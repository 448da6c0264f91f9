"""A stack's limits for real: its workload sees one CPU and its memory group, a workload
that needs more memory than the limit fails (and the trials after it run), and the groups
are gone afterwards."""

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import TEST_ROOT, cli, leftovers

pytestmark = pytest.mark.e2e

PLAN = """
name = "limits"
reps = 1
warmup = 0
rerun_disturbed = 0
baseline = "native"
[stacks.native]
layers = [{{ kind = "tmpfs", size = "64M" }}]
[stacks.control]
layers = [{{ kind = "tmpfs", size = "64M" }}]
limits = {{ cpus = 1, memory = "192M" }}
[workloads.where]
kind = "command"
run = "sh {where}"
[workloads.hungry]
kind = "command"
run = "{python} {hungry}"
"""


def test_the_control_stack_runs_on_one_cpu_within_its_memory(needs_root: None, tmp_path: Path) -> None:
    seen, where, hungry = tmp_path / "seen.txt", tmp_path / "where.sh", tmp_path / "hungry.py"
    where.write_text(
        "(grep Cpus_allowed_list /proc/self/status; grep -E 'cpuset|memory' /proc/self/cgroup; echo end)"
        f" >> {seen}\n"
    )
    hungry.write_text(
        "b = bytearray(512 * 2**20)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\n"
    )  # touched: resident
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(where=where, hungry=hungry, python=sys.executable))
    db, scratch = tmp_path / "r.db", TEST_ROOT / "limits"
    cli("run", str(plan), "--db", str(db), "--scratch", str(scratch), "--quiet", check=True)
    document = json.loads(cli("report", "--db", str(db), "--format", "json", check=True).stdout)
    runs = {(r["stack"], r["workload"]): r for r in document["runs"]}
    assert runs[("native", "where")]["status"] == runs[("native", "hungry")]["status"] == "ok"
    assert runs[("control", "where")]["status"] == "ok"
    hungry = runs[("control", "hungry")]
    # Killed by the kernel's OOM killer within the group: SIGKILL, 128 + 9 from its shell.
    assert hungry["status"] == "failed" and "137" in hungry["error"], hungry["error"]
    blocks = [block for block in seen.read_text().split("end\n") if block.strip()]
    by_cpus = {block.splitlines()[0].split()[-1]: block for block in blocks}
    everywhere = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    assert "0" in by_cpus and len(by_cpus) == (2 if everywhere != "0" else 1), blocks  # CPU 0 alone
    limited = by_cpus["0"]
    assert "layerbench/" in limited and "-L2-cpuset" in limited and "-L2-memory" in limited, limited
    lines = " ".join(document["stacks"]["control"]["mount_lines"])
    assert "limits: CPUs 0 (1)" in lines and "limits: memory 192M" in lines, lines
    assert leftovers(scratch) == []
