"""The sshfs layer's server config and client command line (no daemons)."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from layerbench.stacks.sshfs import SshfsLayer, SshfsOptions, ssh_ciphers, sshd_config


def test_the_server_takes_one_key_on_loopback_and_serves_sftp_only() -> None:
    config = sshd_config(2222, Path("/s/k/host_key"), Path("/s/k/authorized_keys")).splitlines()
    assert "ListenAddress 127.0.0.1:2222" in config and "AllowUsers root@127.0.0.1" in config
    assert "AuthorizedKeysFile /s/k/authorized_keys" in config and "PasswordAuthentication no" in config
    assert "ForceCommand internal-sftp" in config and "AllowTcpForwarding no" in config
    assert not any(line.startswith("ListenAddress 0.0.0.0") or line == "UsePAM yes" for line in config)


def test_the_client_checks_the_host_key_and_passes_the_options() -> None:
    layer = SshfsLayer(
        SshfsOptions(
            kind="sshfs", direct_io=True, dir_cache=False, compression=True, options=["max_conns=2"]
        ),
        2,
    )
    layer._client = (2222, Path("/s/k/client_key"), Path("/s/k/known_hosts"))
    argv = layer.daemon_argv(Path("/s/below"), Path("/s/L2-fuse"))
    assert argv[:4] == ["sshfs", "-f", "-F", "/dev/null"] and argv[-2:] == [
        "root@127.0.0.1:/s/below",
        "/s/L2-fuse",
    ]
    options = argv[argv.index("-o") + 1].split(",")
    assert {"port=2222", "IdentityFile=/s/k/client_key", "StrictHostKeyChecking=yes", "BatchMode=yes"} <= set(
        options
    )
    assert {"UserKnownHostsFile=/s/k/known_hosts", "GlobalKnownHostsFile=/dev/null"} <= set(options)
    assert {"direct_io", "dir_cache=no", "compression=yes", "max_conns=2"} <= set(options)
    single = SshfsLayer(SshfsOptions(kind="sshfs", multithreaded=False, readonly=True), 1)
    single._client = layer._client
    argv = single.daemon_argv(Path("/b"), Path("/t"))
    assert "-s" in argv and "ro" in argv[argv.index("-o") + 1].split(",")


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"options": ["a,b"]}, "one usable option (one per list item)"),
        ({"cipher": "rot13"}, "cipher 'rot13': this ssh knows"),
        ({"direct_io": "yes"}, "valid boolean"),
    ],
)
def test_bad_sshfs_options_say_what_is_valid(options: dict[str, object], said: str) -> None:
    if "cipher" in options and not ssh_ciphers():
        pytest.skip("ssh is not installed: its ciphers are not known")
    with pytest.raises(ValidationError) as raised:
        SshfsOptions(kind="sshfs", **options)  # type: ignore[arg-type]
    assert said in str(raised.value)
