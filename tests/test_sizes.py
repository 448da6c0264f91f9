import pytest

from layerbench.core.sizes import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4K", 4096),
        ("512M", 512 * 2**20),
        ("2G", 2 * 2**30),
        ("1.5T", int(1.5 * 2**40)),
        ("100", 100),
        (4096, 4096),
        ("1g", 2**30),
        ("64MiB", 64 * 2**20),
        (" 8 K ", 8192),
    ],
)
def test_parse_size_accepts_suffixes(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "-1G", "0", "1X", "G", "1.2.3M", "9999T", True, "１G"])
def test_parse_size_rejects_with_what_is_valid(text: str) -> None:
    with pytest.raises(ValueError, match=r"size|positive|typo"):
        parse_size(text)


def test_format_size_round_trips_common_sizes() -> None:
    assert format_size(2**30) == "1G"
    assert format_size(1536 * 2**20) == "1.5G"
    assert format_size(512) == "512B"
