"""A fleet's credentials: the token of Ray's token authentication (Ray >= 2.52).

`layerbench host head` creates them (a directory of mode 0700 holding `token`, mode 0600);
every host and every client of the fleet is given a copy (`--credentials DIR`, by default
~/.config/layerbench/fleet). With them every Ray process of the fleet runs with
RAY_AUTH_MODE=token, and the GCS, raylets, object managers and workers refuse any request
that does not carry the token; a client without it cannot connect or submit work.

They are checked on every use: a directory or token that its group or others could read is
refused, since anyone who reads the token can run code as root on every host."""

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from layerbench.core.errors import UserError

DEFAULT = Path.home() / ".config" / "layerbench" / "fleet"
TOKEN = "token"
_AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@dataclass(frozen=True)
class Credentials:
    directory: Path

    @property
    def token(self) -> Path:
        return self.directory / TOKEN

    def environment(self) -> dict[str, str]:
        """What a Ray process of the fleet needs: token mode, the token's file (never the
        token itself, which would show in the process's environment)."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token)}

    def child_environment(self) -> dict[str, str]:
        # RAY_AUTH_TOKEN would win over the file: a stray one must not reach Ray.
        inherited = {k: v for k, v in os.environ.items() if k not in _AUTH_VARIABLES}
        return inherited | self.environment()

    def activate(self) -> None:
        """This process (a client of the fleet) authenticates with them from now on."""
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]  # partial stub

        for name in _AUTH_VARIABLES:
            os.environ.pop(name, None)
        os.environ.update(self.environment())
        # Ray caches its configuration and the token at first use; read both again.
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def _private(path: Path, what: str, expected: int) -> os.stat_result:
    try:
        found = path.lstat()
    except FileNotFoundError:
        raise UserError(
            f"fleet credentials: no {what} {path}; copy the head's credentials directory here "
            "(created by `layerbench host head`), or give --credentials DIR"
        ) from None
    except PermissionError:
        raise UserError(f"fleet credentials: {path}: permission denied") from None
    if stat.S_IFMT(found.st_mode) != expected:
        raise UserError(f"fleet credentials: {path} is not a {what}")
    if found.st_mode & 0o077:
        raise UserError(
            f"fleet credentials: {path} is readable by group or others "
            f"(mode {stat.S_IMODE(found.st_mode):04o}); chmod {'700' if what == 'directory' else '600'} it"
        )
    if found.st_uid != os.geteuid():
        raise UserError(f"fleet credentials: {path} belongs to uid {found.st_uid}, not to this user")
    return found


def load(directory: Path | None) -> Credentials:
    """The fleet's credentials in directory (default: DEFAULT), checked."""
    credentials = Credentials((directory or DEFAULT).absolute())
    _private(credentials.directory, "directory", stat.S_IFDIR)
    _private(credentials.token, "token file", stat.S_IFREG)
    try:
        token = credentials.token.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"fleet credentials: {credentials.token}: unreadable ({exc})") from None
    if len(token) < 32 or not token.isalnum():
        raise UserError(f"fleet credentials: {credentials.token} holds no token")
    return credentials


def create(directory: Path | None) -> Credentials:
    """The credentials in directory, made there first if it holds none (a head restarted
    keeps its token, so the hosts' copies stay valid)."""
    credentials = Credentials((directory or DEFAULT).absolute())
    if not credentials.token.exists():
        if not credentials.directory.exists():
            credentials.directory.parent.mkdir(parents=True, exist_ok=True)
            credentials.directory.mkdir(mode=0o700)
            os.chmod(credentials.directory, 0o700)  # mkdir's mode is masked by the umask
        _private(credentials.directory, "directory", stat.S_IFDIR)
        descriptor = os.open(credentials.token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32))  # 256 bits, as Ray's own generator
    return load(directory)
