"""A Debian source package as the archive, for real: downloaded once into the cache (not
the scratch root), the host's apt configuration untouched, then unpacked like any other."""

from pathlib import Path

import pytest
from helpers import TEST_ROOT, leftovers, run_plan

pytestmark = pytest.mark.e2e

PLAN = """
name = "debian"
reps = 2
warmup = 0
rerun_disturbed = 0
[stacks.ram]
layers = [{ kind = "tmpfs", size = "128M" }]
[workloads.hello]
kind = "extract"
archive = "debian:hello"
"""


def _apt_configuration() -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in Path("/etc/apt").rglob("*") if p.is_file()}


def test_a_debian_source_package_is_fetched_once_and_unpacked(needs_root: None, tmp_path: Path) -> None:
    before = _apt_configuration()
    scratch = TEST_ROOT / "debian-archive"
    document = run_plan(tmp_path, PLAN, scratch)
    runs = document["runs"]
    assert len(runs) == 2 and all(r["status"] == "ok" for r in runs), [r["error"] for r in runs]
    assert len({r["units"] for r in runs}) == 1 and runs[0]["units"] > 100_000  # the same tree, twice
    cached = list(Path("/var/cache/layerbench/sources/bookworm/hello").glob("hello_*.orig.tar.*"))
    assert cached, "the tarball is cached outside the scratch root"
    assert _apt_configuration() == before
    assert leftovers(scratch) == []
