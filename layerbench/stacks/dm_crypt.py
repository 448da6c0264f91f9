"""dm-crypt: block-device encryption, LUKS2 on a loop device over an image file on the layer
below, a file system on the mapping. The key is random for each trial and never written
to a file (cryptsetup reads it from a pipe); the key-slot's PBKDF is cut to its minimum,
because it only guards that random key and would otherwise cost seconds of build.

The host's kernel here has no device-mapper: put the layer above a vm layer, whose guest
kernel loads dm_mod and dm_crypt at boot. Its cost is its ratio against an `image` stack
of the same size in the same guest, or the guest's plain disk."""

import contextlib
import re
import secrets
from collections.abc import Iterator
from dataclasses import replace
from typing import Literal

from pydantic import field_validator

from layerbench.core.sizes import SizeText, parse_size
from layerbench.linux import system
from layerbench.stacks.base import BuildContext, Exposed, Layer, Placement, register
from layerbench.stacks.image import DeviceFsOptions, loop_image

_LUKS2_HEADER = 16 * 2**20  # cryptsetup's default LUKS2 header and key-slot area
# cipher-chainmode-ivmode[:ivopts], as cryptsetup --cipher takes it (aes-xts-plain64,
# serpent-xts-plain64, aes-cbc-essiv:sha256, xchacha12,aes-adiantum-plain64).
_CIPHER = re.compile(r"^[a-z0-9]+(,[a-z0-9]+)?(-[a-z0-9]+){1,2}(:[a-z0-9]+)?$")


class DmCryptOptions(DeviceFsOptions):
    size: SizeText = "1G"
    cipher: str = "aes-xts-plain64"
    key_size: Literal[128, 256, 512] = 512  # bits; XTS splits it in two: 512 is AES-256
    sector_size: Literal[512, 1024, 2048, 4096] = 4096  # bytes encrypted as one unit
    # dm-crypt's own queues, bypassed (cryptsetup --perf-no_*_workqueue, Linux 5.9 on)
    no_read_workqueue: bool = False
    no_write_workqueue: bool = False

    @field_validator("cipher")
    @classmethod
    def _cipher(cls, value: str) -> str:
        if not _CIPHER.match(value):
            raise ValueError(
                f"{value!r} is not a cipher spec: cipher-chainmode-ivmode, as cryptsetup takes it "
                '("aes-xts-plain64", "serpent-xts-plain64", "aes-cbc-essiv:sha256")'
            )
        return value

    @field_validator("size")
    @classmethod
    def _size(cls, value: str) -> str:
        if parse_size(value) < 2 * _LUKS2_HEADER + 32 * 2**20:
            raise ValueError(f"{value}: too small for the LUKS2 header (16M) and a file system; at least 64M")
        return value

    def flags(self) -> list[str]:
        return [
            *(["--perf-no_read_workqueue"] if self.no_read_workqueue else []),
            *(["--perf-no_write_workqueue"] if self.no_write_workqueue else []),
        ]


@register
class DmCryptLayer(Layer[DmCryptOptions]):
    kind = "dm-crypt"
    Options = DmCryptOptions
    summary = "LUKS2 (dm-crypt) on a loop device over an image file, a file system on it"
    tools = ("cryptsetup", "losetup", "mount")
    kernel_modules = ("dm_mod", "dm_crypt")

    @classmethod
    def extra_tools(cls, options: object) -> tuple[str, ...]:
        return (f"mkfs.{getattr(options, 'fs', 'ext4')}",)

    def fs_size(self) -> int | None:
        return parse_size(self.options.size) - _LUKS2_HEADER

    def place(self, below: Placement) -> Placement:
        options = self.options
        placed = below.bounded(parse_size(options.size), f"dm-crypt image size={options.size}")
        return replace(placed, writable=not options.readonly)

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        image = below.path / f"layer{self.index}-dm-crypt.img"
        target = ctx.subdir(f"L{self.index}-dm-crypt")
        key = secrets.token_hex(64)  # the passphrase of its one key slot, never on a disk
        with contextlib.ExitStack() as held:
            loop = held.enter_context(loop_image(ctx, image, parse_size(options.size)))
            luks = ["--type", "luks2", "--cipher", options.cipher, "--key-size", str(options.key_size)]
            luks += ["--sector-size", str(options.sector_size)]
            luks += ["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"]  # guards a random key
            formatted = ["cryptsetup", "luksFormat", "--batch-mode", *luks, "--key-file", "-", loop]
            system.run(formatted, input_text=key, timeout=600)

            def open_mapping(name: str) -> str:
                opened = ["cryptsetup", "open", "--type", "luks2", "--key-file", "-", *options.flags()]
                system.run([*opened, loop, name], input_text=key, timeout=600)
                return f"/dev/mapper/{name}"

            label = f"{ctx.workdir.name}-L{self.index}"
            device = held.enter_context(ctx.scratch.dm_mappings(label, open_mapping))
            mounted = held.enter_context(options.made_and_mounted(ctx, device, target))
            flags = "".join(f", {flag.removeprefix('--perf-')}" for flag in options.flags())
            line = (
                f"{device} LUKS2 {options.cipher}, {options.key_size}-bit key (random), "
                f"{options.sector_size}-byte sectors{flags} [{loop} -> {image}]"
            )
            yield Exposed(path=target, mount_lines=[mounted, line], fs_size=self.fs_size())
