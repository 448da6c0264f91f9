"""Sizes as people write them: 4K, 512M, 2G, 1.5T (powers of 1024)."""

import re
from typing import Annotated

from pydantic import AfterValidator

_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_PATTERN = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE | re.ASCII)

MAX_SIZE = 1024**5  # a petabyte: anything larger is a typo, not a plan


def parse_size(value: str | int) -> int:
    """Return a size in bytes; raise ValueError naming what is valid."""
    if isinstance(value, bool):
        raise ValueError("a size is a number of bytes or a string like '4K', '512M', '2G'")
    if isinstance(value, int):
        number = value
    else:
        match = _PATTERN.match(str(value))
        if not match:
            raise ValueError(
                f"{value!r} is not a size; write a number with an optional K, M, G or T "
                "suffix, e.g. '4K', '512M', '2G'"
            )
        number = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if number <= 0:
        raise ValueError(f"size must be positive, got {value!r}")
    if number > MAX_SIZE:
        raise ValueError(f"size {value!r} is larger than 1P; that is surely a typo")
    return number


def format_size(n_bytes: float) -> str:
    """Human form with binary units, e.g. 1.5G."""
    for unit in ("", "K", "M", "G", "T"):
        if abs(n_bytes) < 1024 or unit == "T":
            if unit == "":
                return f"{int(n_bytes)}B"
            return f"{n_bytes:.1f}{unit}".replace(".0" + unit, unit)
        n_bytes /= 1024
    raise AssertionError("unreachable")


def _checked(value: str) -> str:
    parse_size(value)
    return value


# A plan key holding a size: kept as written (reports show "2G"), checked when the plan loads.
SizeText = Annotated[str, AfterValidator(_checked)]
