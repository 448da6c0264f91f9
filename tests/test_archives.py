"""Archive specs: built-in trees, Debian source packages, the user's tarballs."""

from pathlib import Path

import pytest

from layerbench.content import archives
from layerbench.plan import parse_plan


@pytest.mark.parametrize("spec", ["builtin:small-tree", "debian:linux", "debian:g++-12", "debian:hello"])
def test_valid_specs_pass(spec: str) -> None:
    assert archives.check_spec(spec) == spec


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("debian:", "debian:PACKAGE names a Debian source package"),
        ("debian:Linux", "debian:PACKAGE names a Debian source package"),
        ("builtin:huge", "valid: builtin:source-tree"),
        ("/no/such.tar.xz", "builtin:NAME, debian:PACKAGE or a tar archive"),
    ],
)
def test_bad_specs_say_what_is_valid(spec: str, said: str) -> None:
    with pytest.raises(ValueError, match=said.replace("(", r"\(")):
        archives.check_spec(spec)


def test_a_package_not_yet_downloaded_is_estimated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(archives, "_cached_debian", lambda package: None)
    assert archives.archive_estimate("debian:linux") == 1600 * 2**20
    assert archives.packed_size("debian:linux") == 160 * 2**20
    assert archives.archive_estimate("debian:hello") == 0  # small until fetched
    tarball = tmp_path / "hello_2.10.orig.tar.gz"
    tarball.write_bytes(b"\0" * 1000)
    monkeypatch.setattr(archives, "_cached_debian", lambda package: tarball)
    assert archives.packed_size("debian:hello") == 1000
    assert archives.archive_estimate("debian:hello") == 1000 * archives._UNPACKED_PER_PACKED
    # Once its listing has been read, what it holds.
    (tmp_path / "hello_2.10.orig.tar.gz.layerbench.json").write_text('{"files": 3, "bytes": 40000}')
    assert archives.archive_estimate("debian:hello") == 50000


def test_the_kernels_source_on_a_small_tmpfs_is_refused_before_the_download(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(archives, "_cached_debian", lambda package: None)
    plan = (
        'name = "x"\n[stacks.ram]\nlayers = [{ kind = "tmpfs", size = "512M" }]\n'
        '[workloads.linux]\nkind = "extract"\narchive = "debian:linux"\n'
    )
    with pytest.raises(Exception, match=r"stacks.ram: workload linux .* writes up to 1.6G"):
        parse_plan(plan, "plan.toml")
