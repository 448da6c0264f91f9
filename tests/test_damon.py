"""linux/damon.py: the running DAMON schemes, read from a sysfs tree; and how a host's
memory behind the runs reads in the report (observe/host.py)."""

from pathlib import Path

from layerbench.linux import damon
from layerbench.observe.host import memory_summary


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _kdamond(root: Path, index: int, state: str, action: str = "pageout") -> None:
    kdamond = root / str(index)
    _write(kdamond / "state", state)
    context = kdamond / "contexts" / "0"
    _write(context / "operations", "paddr")
    _write(context / "monitoring_attrs" / "intervals" / "aggr_us", "5000000")
    scheme = context / "schemes" / "0"
    _write(scheme / "action", action)
    _write(scheme / "access_pattern" / "age" / "min", "12")
    _write(scheme / "quotas" / "bytes", str(128 << 20))
    _write(scheme / "quotas" / "reset_interval_ms", "1000")


def test_a_running_pageout_scheme_is_read_with_its_idle_time_and_rate(tmp_path: Path) -> None:
    _kdamond(tmp_path, 0, "on")
    (scheme,) = damon.running_schemes(tmp_path)
    assert scheme == damon.Scheme("paddr", "pageout", 60.0, 128 << 20)
    assert scheme.sentence() == "DAMON pageout on physical memory untouched for 60 s, at most 128 MiB/s"


def test_a_kdamond_that_is_off_runs_no_scheme(tmp_path: Path) -> None:
    _kdamond(tmp_path, 0, "off")
    _kdamond(tmp_path, 1, "on", action="stat")
    assert [scheme.action for scheme in damon.running_schemes(tmp_path)] == ["stat"]


def test_no_damon_at_all_reads_empty(tmp_path: Path) -> None:
    assert damon.running_schemes(tmp_path / "absent") == []


def test_the_report_names_free_page_reporting_and_each_scheme() -> None:
    scheme = damon.Scheme("paddr", "pageout", 60.0, 128 << 20).as_json()
    summary = memory_summary(9, [scheme])
    assert summary is not None
    assert summary.startswith("free page reporting on (free blocks of 2 MiB go back to the hypervisor")
    assert summary.endswith("; DAMON pageout on physical memory untouched for 60 s, at most 128 MiB/s")
    assert memory_summary(None, []) is None
    # a scheme stored by a version with other keys is left out, not a traceback
    assert memory_summary(None, [{"action": "pageout", "rate": 1}]) is None
