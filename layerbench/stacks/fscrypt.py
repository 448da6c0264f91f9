"""fscrypt: file-based encryption, ext4's `encrypt` feature. The layer is an ext4 image made
with `-O encrypt` (every image option applies) whose top is a directory under a v2
encryption policy, unlocked for the trial with a random raw key added through the kernel's
ioctls (FS_IOC_ADD_ENCRYPTION_KEY, FS_IOC_SET_ENCRYPTION_POLICY). The key exists only in
memory: it is removed at teardown, and the kernel drops it with the file system when the
image is unmounted, so a killed run leaves no key behind once `clean` has unmounted it.

Its cost is the ratio against an `image` stack of the same size and options: make that
stack the baseline."""

import contextlib
import errno
import fcntl
import os
import struct
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import model_validator

from layerbench.core.errors import SetupError
from layerbench.linux import procfs
from layerbench.stacks.base import BuildContext, Exposed, LayerOptions, register
from layerbench.stacks.image import ImageLayer, ImageOptions

# linux/fscrypt.h: the ioctls (_IOWR/_IOR of 'f') and their argument layouts.
_ADD_KEY = 0xC0506617  # struct fscrypt_add_key_arg, 80 bytes, then the raw key
_REMOVE_KEY = 0xC0406618  # struct fscrypt_remove_key_arg, 64 bytes
_SET_POLICY = 0x800C6613
_KEY_SPEC_IDENTIFIER = 2  # a v2 policy's key, named by the identifier the kernel derives
_RAW_KEY_BYTES = 64  # enough for every mode (AES-256-XTS takes all 64)

FilenamesMode = Literal["aes-256-cts", "aes-128-cts", "sm4-cts", "adiantum", "aes-256-hctr2"]
CONTENTS = {"aes-256-xts": 1, "aes-128-cbc": 5, "sm4-xts": 7, "adiantum": 9}
FILENAMES = {"aes-256-cts": 4, "aes-128-cts": 6, "sm4-cts": 8, "adiantum": 9, "aes-256-hctr2": 10}
# The pairs the kernel accepts (fscrypt_valid_enc_modes_v2).
PAIRS = {
    ("aes-256-xts", "aes-256-cts"),
    ("aes-256-xts", "aes-256-hctr2"),
    ("aes-128-cbc", "aes-128-cts"),
    ("sm4-xts", "sm4-cts"),
    ("adiantum", "adiantum"),
}
_PARTNER: dict[str, FilenamesMode] = {
    "aes-256-xts": "aes-256-cts",
    "aes-128-cbc": "aes-128-cts",
    "sm4-xts": "sm4-cts",
    "adiantum": "adiantum",
}
_PADDING_FLAG = {4: 0x00, 8: 0x01, 16: 0x02, 32: 0x03}


class FscryptOptions(ImageOptions):
    fs: Literal["ext4"] = "ext4"  # the one with the `encrypt` feature among the images
    contents: Literal["aes-256-xts", "aes-128-cbc", "sm4-xts", "adiantum"] = "aes-256-xts"
    # None: the usual partner of contents (aes-256-cts for aes-256-xts, adiantum for adiantum...)
    filenames: FilenamesMode | None = None
    padding: Literal[4, 8, 16, 32] = 32  # bytes filenames are padded to

    @model_validator(mode="after")
    def _pair(self) -> "FscryptOptions":
        if self.readonly:
            raise ValueError("readonly: the encrypted directory is made on the file system as it is built")
        if self.filenames is None:
            self.filenames = _PARTNER[self.contents]
        if (self.contents, self.filenames) not in PAIRS:
            valid = ", ".join(f"{c} with {f}" for c, f in sorted(PAIRS))
            raise ValueError(
                f"contents {self.contents} with filenames {self.filenames}: the kernel takes {valid}"
            )
        return self

    def mkfs_arguments(self) -> list[str]:
        return [*super().mkfs_arguments(), "-O", "encrypt"]


def add_key(mount_point: Path, raw: bytes) -> bytes:
    """Add a raw key to the file system's keyring; its 16-byte identifier."""
    argument = bytearray(struct.pack("II32sII32s", _KEY_SPEC_IDENTIFIER, 0, b"", len(raw), 0, b"") + raw)
    _ioctl(mount_point, _ADD_KEY, argument, "add the encryption key")
    return bytes(argument[8:24])


def set_policy(directory: Path, identifier: bytes, options: FscryptOptions) -> None:
    """Put an empty directory under a v2 policy: everything made in it is encrypted."""
    flags = _PADDING_FLAG[options.padding]
    assert options.filenames is not None, "the options' validator sets the partner of contents"
    policy = bytearray(
        struct.pack(
            "BBBBB3s16s",
            2,
            CONTENTS[options.contents],
            FILENAMES[options.filenames],
            flags,
            0,
            b"",
            identifier,
        )
    )
    _ioctl(directory, _SET_POLICY, policy, "set the encryption policy")


def remove_key(mount_point: Path, identifier: bytes) -> None:
    argument = bytearray(struct.pack("II32sI20s", _KEY_SPEC_IDENTIFIER, 0, identifier, 0, b""))
    _ioctl(mount_point, _REMOVE_KEY, argument, "remove the encryption key")


def _ioctl(path: Path, request: int, argument: bytearray, what: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, request, argument, True)  # the kernel writes results back into it
    except OSError as exc:
        hint = {
            errno.EOPNOTSUPP: "no encryption in this kernel or file system (CONFIG_FS_ENCRYPTION)",
            errno.EINVAL: "this kernel does not take these modes (its crypto API lacks them)",
            errno.ENOPKG: "this kernel lacks the cipher (its crypto module is not built in)",
        }.get(exc.errno or 0, exc.strerror)
        raise SetupError(f"fscrypt: cannot {what} on {path}: {hint}") from exc
    finally:
        os.close(fd)


def _probe(directory: Path, options: FscryptOptions) -> None:
    """The kernel takes a policy whose ciphers it cannot load, and fails the first file made
    under it (ENOPKG): find out now, at build, rather than in the timed run."""
    probe = directory / "layerbench-probe"
    try:
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as exc:
        if exc.errno != errno.ENOPKG:
            raise SetupError(f"fscrypt: cannot make a file under the policy: {exc.strerror}") from exc
        raise SetupError(
            f"fscrypt: this kernel lacks the cipher for contents {options.contents} or filenames "
            f"{options.filenames} (its crypto API has no such algorithm built in); "
            f"aes-256-xts with aes-256-cts is the one every fscrypt kernel has"
        ) from exc


@register
class FscryptLayer(ImageLayer[FscryptOptions]):
    kind = "fscrypt"
    Options = FscryptOptions
    summary = "an ext4 image with -O encrypt whose top is a directory under a v2 policy, random key"
    filesystems = ("ext4",)

    @classmethod
    def missing(cls, options: LayerOptions | None = None, *, guest: bool = False) -> list[str]:
        lacks = super().missing(options, guest=guest)
        encryption = Path("/sys/fs/ext4/features/encryption")
        if not guest and procfs.kernel_has_filesystem("ext4") and not encryption.exists():
            lacks.append("ext4 encryption in the kernel (CONFIG_FS_ENCRYPTION)")
        return lacks

    @contextlib.contextmanager
    def expose(self, ctx: BuildContext, below: Exposed) -> Iterator[Exposed]:
        options = self.options
        with super().expose(ctx, below) as fs:
            directory = fs.path / "encrypted"
            directory.mkdir()
            identifier = add_key(fs.path, os.urandom(_RAW_KEY_BYTES))
            try:
                set_policy(directory, identifier, options)
                _probe(directory, options)
                line = (
                    f"fscrypt v2 policy on {directory}: contents {options.contents}, filenames "
                    f"{options.filenames}, padding {options.padding}, key {identifier.hex()} (random)"
                )
                yield replace(fs, path=directory, mount_lines=[*fs.mount_lines, line])
            finally:
                remove_key(fs.path, identifier)
