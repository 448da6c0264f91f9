"""lvm-thin: an LVM thin volume in a thin pool, on a loop device over an image file on the
layer below, a file system on the volume. `snapshot = true` takes a thin snapshot of the
volume once the workload is prepared, just before the timed run: its writes then land on
blocks the snapshot shares, the cost of the first writes after a snapshot.

LVM runs with a configuration of its own on every call: it sees only this layer's loop
device, waits for no udev, keeps no metadata backups in /etc, and starts no monitoring
daemon. The host's kernel here has no device-mapper: put the layer above a vm layer, whose
guest kernel loads dm_thin_pool at boot."""

import contextlib
import math
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from typing import Literal

from pydantic import field_validator, model_validator

from layerbench.core.errors import SetupError
from layerbench.core.facts import Fact, declare
from layerbench.core.sizes import SizeText, parse_size
from layerbench.linux import devmapper, system
from layerbench.stacks.base import BuildContext, Exposed, Layer, Placement, register
from layerbench.stacks.image import DeviceFsOptions, loop_image

POOL_USED_BEFORE = Fact(
    "thin_pool_used_before", "before", "lvm-thin: the share of the pool in use before the run", float
)
POOL_USED_AFTER = Fact(
    "thin_pool_used_after", "after", "lvm-thin: the share of the pool in use after the run", float
)
SNAPSHOT = Fact(
    "thin_snapshot", "before", "lvm-thin snapshot = true: the snapshot taken just before the run", str
)
declare(POOL_USED_BEFORE, POOL_USED_AFTER, SNAPSHOT)

_SNAPSHOT = "before-run"  # LVM reserves names that start with "snapshot"
_MIN_SIZE = 64 * 2**20
_PV_SLACK = 16 * 2**20  # the physical volume's label and metadata area, extent rounding


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


class LvmThinOptions(DeviceFsOptions):
    size: SizeText = "1G"  # the thin volume's virtual size (may exceed the pool: overprovisioned)
    pool_size: SizeText = "1G"  # the pool's data: what the volume and its snapshots can hold
    chunk_size: SizeText = "64K"  # the unit the pool allocates and a snapshot copies
    zero: bool = True  # a new chunk is zeroed before its first write (lvcreate --zero)
    discards: Literal["passdown", "nopassdown", "ignore"] = "passdown"
    snapshot: bool = False

    @field_validator("size", "pool_size")
    @classmethod
    def _big_enough(cls, value: str) -> str:
        if parse_size(value) < _MIN_SIZE:
            raise ValueError(f"{value}: at least 64M")
        return value

    @field_validator("chunk_size")
    @classmethod
    def _chunk(cls, value: str) -> str:
        chunk = parse_size(value)
        if not (_power_of_two(chunk) and 64 * 2**10 <= chunk <= 2**30):
            raise ValueError(f"{value}: a power of two from 64K to 1G")
        return value

    @model_validator(mode="after")
    def _chunk_fits(self) -> "LvmThinOptions":
        if parse_size(self.chunk_size) * 16 > parse_size(self.pool_size):
            raise ValueError(f"chunk_size {self.chunk_size} is too large for a pool of {self.pool_size}")
        return self

    def metadata_bytes(self) -> int:
        """The pool's metadata volume: 64 bytes a chunk, twice over, at least 8 MiB."""
        chunks = parse_size(self.pool_size) // parse_size(self.chunk_size)
        return max(8 * 2**20, math.ceil(chunks * 128 / 2**20) * 2**20)

    def image_bytes(self) -> int:
        # The pool's data, its metadata and LVM's spare copy of the metadata, the PV's own.
        return parse_size(self.pool_size) + 2 * self.metadata_bytes() + _PV_SLACK


class _Lvm:
    """LVM's commands, seeing only one device, with no udev, backups or daemons."""

    def __init__(self, device: str) -> None:
        self.config = (
            f'devices {{ filter = [ "a|^{device}$|", "r|.*|" ] obtain_device_list_from_udev = 0 '
            "use_devicesfile = 0 } activation { udev_sync = 0 udev_rules = 0 monitoring = 0 } "
            "backup { backup = 0 archive = 0 }"
        )

    def __call__(self, command: str, *arguments: str) -> str:
        done = subprocess.run(
            [command, "--config", self.config, *arguments], capture_output=True, text=True, timeout=600
        )
        if done.returncode != 0:
            # LVM's reason comes before its last line ("Run `lvcreate --help' ...").
            said = [line.strip() for line in done.stderr.splitlines() if "--help" not in line]
            raise SetupError(
                f"{command} {' '.join(arguments)}: {'; '.join(filter(None, said)) or done.returncode}"
            )
        return done.stdout

    def used(self, volume: str) -> float:
        """The share of a thin pool's data in use."""
        shown = self("lvs", "--noheadings", "--nosuffix", "-o", "data_percent", volume).strip()
        try:
            return float(shown) / 100
        except ValueError:
            raise SetupError(f"lvs {volume}: no data_percent in {shown!r}") from None


@register
class LvmThinLayer(Layer[LvmThinOptions]):
    kind = "lvm-thin"
    Options = LvmThinOptions
    summary = (
        "an LVM thin volume in a thin pool on a loop device, a file system on it, optionally snapshotted"
    )
    tools = ("lvcreate", "thin_check", "losetup", "mount")
    # LVM looks for the snapshot target before it takes even a thin snapshot.
    kernel_modules = ("dm_mod", "dm_thin_pool", "dm_snapshot")

    @classmethod
    def extra_tools(cls, options: object) -> tuple[str, ...]:
        return (f"mkfs.{getattr(options, 'fs', 'ext4')}",)

    def fs_size(self) -> int | None:
        return parse_size(self.options.size)

    def place(self, below: Placement) -> Placement:
        options = self.options
        placed = below.bounded(options.image_bytes(), f"lvm-thin image for pool_size={options.pool_size}")
        capacity = min(parse_size(options.size), parse_size(options.pool_size))
        placed = replace(placed, capacity=min(placed.capacity or capacity, capacity))
        return replace(
            placed, holder=f"lvm-thin pool_size={options.pool_size}", writable=not options.readonly
        )

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        image = below.path / f"layer{self.index}-lvm.img"
        target = ctx.subdir(f"L{self.index}-lvm-thin")
        with contextlib.ExitStack() as held:
            loop = held.enter_context(loop_image(ctx, image, options.image_bytes()))
            lvm = _Lvm(loop)

            def create(group: str) -> str:
                lvm("pvcreate", "--yes", "--force", loop)
                lvm("vgcreate", "--yes", group, loop)
                pool = ["--type", "thin-pool", "--size", f"{parse_size(options.pool_size)}b"]
                pool += ["--poolmetadatasize", f"{options.metadata_bytes()}b"]
                pool += ["--chunksize", f"{parse_size(options.chunk_size) // 1024}k"]
                pool += ["--zero", "y" if options.zero else "n", "--discards", options.discards]
                lvm("lvcreate", "--yes", *pool, "--name", "pool", group)
                thin = ["--type", "thin", "--virtualsize", f"{parse_size(options.size)}b"]
                lvm("lvcreate", "--yes", *thin, "--thinpool", "pool", "--name", "volume", group)
                return f"/dev/mapper/{group.replace('-', '--')}-volume"

            label = f"{ctx.workdir.name}-L{self.index}"
            device = held.enter_context(ctx.scratch.dm_mappings(label, create, lvm=True))
            group = devmapper.mapping_name(ctx.scratch.root, label)  # what create() was given
            mounted = held.enter_context(options.made_and_mounted(ctx, device, target))

            def snapshot() -> dict[str, object]:
                facts: dict[str, object] = {POOL_USED_BEFORE.key: lvm.used(f"{group}/pool")}
                if options.snapshot:
                    with contextlib.suppress(SetupError):  # a kept stack's last snapshot
                        lvm("lvremove", "--yes", f"{group}/{_SNAPSHOT}")
                    system.run(["sync", "-f", str(target)])  # the snapshot holds what is written
                    lvm("lvcreate", "--yes", "--snapshot", "--name", _SNAPSHOT, f"{group}/volume")
                    facts[SNAPSHOT.key] = f"{group}/{_SNAPSHOT} of {group}/volume"
                return facts

            line = (
                f"{device} LVM thin volume {options.size} in a pool of {options.pool_size} "
                f"(chunks {options.chunk_size}, zero {'y' if options.zero else 'n'}, discards "
                f"{options.discards}{', snapshot before each run' if options.snapshot else ''}) "
                f"[{loop} -> {image}]"
            )
            yield Exposed(
                path=target,
                mount_lines=[mounted, line],
                fs_size=self.fs_size(),
                before_run=[snapshot],
                run_facts=[lambda: {POOL_USED_AFTER.key: lvm.used(f"{group}/pool")}],
            )
