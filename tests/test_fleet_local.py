"""layerbench.fleet.local: where a fleet on this machine keeps Ray's temporary directory."""

from pathlib import Path

import pytest

from layerbench.core.errors import UserError
from layerbench.fleet.local import ray_temp_dir


def test_rays_temporary_directory_lies_under_the_fleets_root() -> None:
    assert ray_temp_dir(Path("/var/tmp/layerbench-fleet")) == Path("/var/tmp/layerbench-fleet/ray")


def test_a_root_too_long_for_rays_sockets_is_refused_with_its_limit() -> None:
    longest = Path("/" + "d" * 38)  # 39 characters: a socket path of exactly 107 bytes
    socket = ray_temp_dir(longest) / "session_2026-12-04_17-25-03_123456_4194304/sockets/plasma_store"
    assert len(str(socket)) == 107
    refused = r"too long a path for Ray's sockets under it \(at most 39 characters\)"
    with pytest.raises(UserError, match=refused):
        ray_temp_dir(Path("/" + "d" * 39))
