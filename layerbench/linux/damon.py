"""DAMON's memory schemes running on this kernel (its sysfs interface, read only).

A running kdamond with a `pageout` scheme over physical memory reclaims what has gone untouched
for a while (page cache, on a host without swap), at a rate its quota caps, from a kernel
thread that shares the CPUs with the runs: the files a run reads that sat idle long enough come
from the device again, and the memory it frees may go back to a hypervisor. The host decides
this, not layerbench; the report says it is there."""

from dataclasses import asdict, dataclass
from pathlib import Path

KDAMONDS = Path("/sys/kernel/mm/damon/admin/kdamonds")


@dataclass(frozen=True)
class Scheme:
    """One scheme of a running kdamond's context."""

    operations: str  # "paddr" (physical memory), "vaddr"/"fvaddr" (a process's)
    action: str  # "pageout", "lru_deprio", "stat", ...
    min_idle_s: float | None  # a region untouched at least this long qualifies (age x aggregation)
    quota_bytes_per_s: int | None  # at most this much acted on a second (None: no cap)

    def as_json(self) -> dict[str, object]:
        return asdict(self)

    def sentence(self) -> str:
        idle = f" untouched for {self.min_idle_s:.0f} s" if self.min_idle_s else ""
        rate = f", at most {self.quota_bytes_per_s / 2**20:.0f} MiB/s" if self.quota_bytes_per_s else ""
        where = "physical memory" if self.operations == "paddr" else f"{self.operations} memory"
        return f"DAMON {self.action} on {where}{idle}{rate}"


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _number(path: Path) -> int | None:
    text = _text(path)
    return int(text) if text is not None and text.isdigit() else None


def _scheme(context: Path, scheme: Path) -> Scheme | None:
    action = _text(scheme / "action")
    if action is None:
        return None
    aggregation_us = _number(context / "monitoring_attrs" / "intervals" / "aggr_us")
    min_age = _number(scheme / "access_pattern" / "age" / "min")
    quota = _number(scheme / "quotas" / "bytes")
    reset_ms = _number(scheme / "quotas" / "reset_interval_ms")
    return Scheme(
        operations=_text(context / "operations") or "unknown",
        action=action,
        min_idle_s=min_age * aggregation_us / 1e6 if min_age and aggregation_us else None,
        quota_bytes_per_s=int(quota * 1000 / reset_ms) if quota and reset_ms else None,
    )


def running_schemes(root: Path = KDAMONDS) -> list[Scheme]:
    """The schemes of every kdamond that is on; empty where DAMON is absent or idle."""
    found: list[Scheme] = []
    for kdamond in sorted(root.glob("[0-9]*")):
        if _text(kdamond / "state") != "on":
            continue
        for context in sorted((kdamond / "contexts").glob("[0-9]*")):
            for scheme_dir in sorted((context / "schemes").glob("[0-9]*")):
                if (scheme := _scheme(context, scheme_dir)) is not None:
                    found.append(scheme)
    return found
