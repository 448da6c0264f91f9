"""A stack's limits for real: its workload sees one CPU and its memory group, a workload
that needs more memory than the limit fails (and the trials after it run), and the groups
are gone afterwards."""

import os
import sys
from pathlib import Path

import pytest
from helpers import TEST_ROOT, leftovers, run_plan

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
[workloads.build]
kind = "command"
run = "make -s -j2 -f {makefile}"
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
    makefile = tmp_path / "Makefile"  # two CPU-bound jobs of a second each, side by side
    spin = "\ttimeout 1 sh -c 'while :; do :; done' || true\n"
    makefile.write_text(f"all: a b\na:\n{spin}b:\n{spin}")
    scratch = TEST_ROOT / "limits"
    document = run_plan(
        tmp_path, PLAN.format(where=where, hungry=hungry, makefile=makefile, python=sys.executable), scratch
    )
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
    # make -j2 on one CPU: its two jobs share it (unlimited, they take both CPUs there are).
    assert runs[("control", "build")]["status"] == "ok"
    assert runs[("control", "build")]["cpu_pct"] <= 110, runs[("control", "build")]["cpu_pct"]
    # The page cache is held to the limit: the group's recorded peak (the run's alone).
    for run in (runs[("control", "where")], hungry):
        assert 0 < run["facts"]["limits_memory_peak_bytes"] <= 192 * 2**20, run["facts"]
    assert "limits_memory_peak_bytes" not in runs[("native", "where")]["facts"]
    lines = " ".join(document["stacks"]["control"]["mount_lines"])
    assert "limits: CPUs 0 (1)" in lines and "limits: memory 192M" in lines, lines
    assert leftovers(scratch) == []
