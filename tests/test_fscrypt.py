"""The fscrypt layer's options and the layouts of its ioctl arguments (no mounts)."""

import struct

import pytest
from pydantic import ValidationError

from layerbench.stacks import fscrypt
from layerbench.stacks.fscrypt import FscryptOptions


def test_the_image_is_ext4_made_with_the_encrypt_feature() -> None:
    options = FscryptOptions(kind="fscrypt", size="64M", journal=False)
    assert options.fs == "ext4" and options.mkfs_arguments()[-2:] == ["-O", "encrypt"]
    assert options.mkfs_arguments()[-4:-2] == ["-O", "^has_journal"]  # the image's own options still apply


@pytest.mark.parametrize(
    ("contents", "filenames"),
    [
        ("aes-256-xts", "aes-256-cts"),
        ("adiantum", "adiantum"),
        ("aes-128-cbc", "aes-128-cts"),
        ("sm4-xts", "sm4-cts"),
    ],
)
def test_filenames_default_to_the_partner_of_contents(contents: str, filenames: str) -> None:
    assert FscryptOptions(kind="fscrypt", contents=contents).filenames == filenames  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"contents": "adiantum", "filenames": "aes-256-cts"}, "the kernel takes adiantum with adiantum"),
        ({"fs": "xfs"}, "'ext4'"),
        ({"padding": 12}, "4, 8, 16 or 32"),
        ({"readonly": True}, "the encrypted directory is made on the file system as it is built"),
        ({"contents": "aes-512"}, "'aes-256-xts'"),
    ],
)
def test_bad_fscrypt_options_say_what_is_valid(options: dict[str, object], said: str) -> None:
    with pytest.raises(ValidationError) as raised:
        FscryptOptions(kind="fscrypt", **options)  # type: ignore[arg-type]
    assert said in str(raised.value)


def test_the_ioctl_numbers_match_their_argument_sizes() -> None:
    # _IOC(dir, 'f', nr, size): the size field is bits 16-29.
    assert (fscrypt._ADD_KEY >> 16) & 0x3FFF == struct.calcsize("II32sII32s") == 80
    assert (fscrypt._REMOVE_KEY >> 16) & 0x3FFF == struct.calcsize("II32sI20s") == 64
    assert (
        fscrypt._ADD_KEY & 0xFF == 23
        and fscrypt._REMOVE_KEY & 0xFF == 24
        and fscrypt._SET_POLICY & 0xFF == 19
    )
    assert struct.calcsize("BBBBB3s16s") == 24  # struct fscrypt_policy_v2
