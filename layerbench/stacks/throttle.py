"""throttle: a known, injected cost. Limits the bandwidth or IOPS of the block device under
the layer below, through a control group the workload's timed run joins before it starts.

What gets slowed is the I/O that the workload's own processes submit. With cgroup v1
(blkio) buffered writes are written back by kernel threads on behalf of the root group,
so only direct I/O, fsync'd metadata and reads are held back; with cgroup v2 (io) the
writeback of the workload's dirty pages is charged to its group as well. The device is
the first one under the layer below: the loop device of an image (not the disk behind
it, which the loop worker writes to from outside the group), the disk of a directory.
"""

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import field_validator, model_validator

from layerbench.core.errors import SetupError
from layerbench.core.sizes import parse_size
from layerbench.linux import cgroups, mounts
from layerbench.stacks.base import BuildContext, Exposed, Layer, LayerOptions, register

_LIMITS = ("read_bps", "write_bps", "read_iops", "write_iops")


class ThrottleOptions(LayerOptions):
    write_bps: int | str | None = None  # bytes per second: 100000000 or "100M"
    read_bps: int | str | None = None
    write_iops: int | None = None
    read_iops: int | None = None
    devices: Literal["top", "all"] = "top"  # the first device under the layer below, or every one

    @field_validator("write_bps", "read_bps")
    @classmethod
    def _rate(cls, value: int | str | None) -> int | str | None:
        if value is not None:
            parse_size(value)
        return value

    @field_validator("write_iops", "read_iops")
    @classmethod
    def _iops(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError("IOPS must be a positive number")
        return value

    @model_validator(mode="after")
    def _some_limit(self) -> "ThrottleOptions":
        if self.readonly:
            raise ValueError("readonly does not apply to a throttle; set it on the layer below")
        if all(getattr(self, key) is None for key in _LIMITS):
            raise ValueError("give at least one of write_bps, read_bps, write_iops, read_iops")
        return self

    def limits(self) -> dict[str, int]:
        found = {}
        for key in _LIMITS:
            value = getattr(self, key)
            if value is not None:
                found[key] = parse_size(value) if key.endswith("bps") else int(value)
        return found


def _major_minor(name: str) -> str:
    return (Path("/sys/class/block") / name / "dev").read_text().strip()


@register
class ThrottleLayer(Layer[ThrottleOptions]):
    kind = "throttle"
    Options = ThrottleOptions
    summary = "limits bandwidth/IOPS of the block device below (cgroup blkio or io.max)"

    @classmethod
    def missing(cls, options: LayerOptions | None = None, *, guest: bool = False) -> list[str]:
        if not guest and cgroups.io_hierarchy() is None:
            return ["a cgroup v1 blkio or cgroup v2 io controller (mount the cgroup file system)"]
        return []

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        hierarchy = cgroups.io_hierarchy()
        if hierarchy is None:
            raise SetupError(f"throttle: {self.missing()[0]}")
        under = mounts.devices_under(below.path)
        if not under:
            raise SetupError(f"throttle: no block device under {below.path} (a tmpfs keeps data in memory)")
        # Limits apply to whole disks; a partition is throttled through its disk.
        chosen = list(
            dict.fromkeys(mounts.whole_disk(n) for n in (under[:1] if options.devices == "top" else under))
        )
        with ctx.scratch.cgroup(hierarchy, f"{ctx.workdir.name}-L{self.index}") as group:
            lines = []
            for name in chosen:
                settings = cgroups.limit(group, hierarchy.version, _major_minor(name), options.limits())
                lines += [f"throttle {name} (cgroup v{hierarchy.version} {group}): {s}" for s in settings]
            yield Exposed(path=below.path, mount_lines=lines, cgroup_procs=[group / "cgroup.procs"])
