"""The keys of a login. Host keys: pinned, never accepted blindly, and a refusal says in
one line how to fix it. The user's key: the profile's identity_file, which must exist.

The key of a site's login node comes from the profile's `known_hosts` file (or
~/.ssh/known_hosts); an unknown or changed key stops the connection, and the message
names the `ssh-keyscan` / `ssh-keygen -R` line and the fingerprint check to do.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Optional

import paramiko

from lumberjack.errors import RemoteError, SetupError
from lumberjack.profiles.sites import SiteProfile


def known_hosts_file(profile: SiteProfile) -> Path:
    return profile.known_hosts_path() or Path("~/.ssh/known_hosts").expanduser()


def identity_file(profile: SiteProfile) -> Optional[Path]:
    """The private key the profile names (None: the client's own choice); SetupError, one
    line, when it does not exist."""
    identity = profile.identity_file_path()
    if identity is not None and not identity.is_file():
        raise SetupError(
            f"site {profile.name}: identity_file {identity} does not exist; "
            "fix [site].identity_file in its profile"
        )
    return identity


def pin(client: paramiko.SSHClient, known_hosts: Path) -> None:
    """Let `client` accept only the keys in `known_hosts` (none if it does not exist)."""
    if known_hosts.is_file():
        try:
            client.get_host_keys().load(str(known_hosts))
        except (OSError, paramiko.SSHException) as exc:
            raise SetupError(f"{known_hosts}: unreadable known_hosts file ({exc})") from exc
    client.set_missing_host_key_policy(paramiko.RejectPolicy())


def host_key_name(host: str, port: int) -> str:
    """How known_hosts names the host."""
    return host if port == 22 else f"[{host}]:{port}"


def _fix(profile: SiteProfile, known_hosts: Path) -> tuple[str, str, str]:
    """How known_hosts names the site, the ssh-keyscan line, the fingerprint check."""
    host, port = profile.login_host, profile.port
    keyscan = f"ssh-keyscan {'-p ' + str(port) + ' ' if port != 22 else ''}{host}"
    verify = (
        f"then check its fingerprint (ssh-keygen -lf {known_hosts}) against the one "
        "the site publishes"
    )
    return host_key_name(host, port), keyscan, verify


# A host key that is unknown or changed is a setup mistake (exit 7): cron retrying it
# every minute cannot help, a person must check the key.
def changed_key(profile: SiteProfile, known_hosts: Path) -> SetupError:
    name, keyscan, verify = _fix(profile, known_hosts)
    return SetupError(
        f"host key of {name} does not match {known_hosts}: the site changed its key "
        f"or someone is in the way; if the site announced a new key, run "
        f"ssh-keygen -R '{name}' -f {known_hosts} && {keyscan} >> {known_hosts}, {verify}"
    )


def unknown_key(profile: SiteProfile, known_hosts: Path) -> SetupError:
    name, keyscan, verify = _fix(profile, known_hosts)
    return SetupError(
        f"host key of {name} is not in {known_hosts}; add it with "
        f"{keyscan} >> {known_hosts}, {verify}"
    )


def connect_error(
    profile: SiteProfile, exc: BaseException, known_hosts: Path, connect_timeout: float
) -> BaseException:
    """What failing to connect means, in one line that says what to do (`exc` itself
    when it is none of the SSH or network failures)."""
    host, port = profile.login_host, profile.port
    address = f"{host}:{port}"
    where = f"{profile.user + '@' if profile.user else ''}{address}"
    if isinstance(exc, paramiko.BadHostKeyException):
        return changed_key(profile, known_hosts)
    if isinstance(exc, paramiko.AuthenticationException):
        # The key is not (or no longer) accepted there: a person installs or names it.
        return SetupError(
            f"cannot log in to {where}: authentication failed ({exc}); install your public "
            "key at the site or name the right one in the profile's identity_file"
        )
    if isinstance(exc, paramiko.SSHException) and "known_hosts" in str(exc):
        return unknown_key(profile, known_hosts)
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return RemoteError(f"cannot connect to {address}: connection refused")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return RemoteError(f"cannot connect to {address}: no answer in {connect_timeout:g} s")
    if isinstance(exc, socket.gaierror):
        return RemoteError(f"cannot connect to {address}: unknown host name ({exc})")
    if isinstance(exc, (OSError, paramiko.SSHException, EOFError)):
        return RemoteError(f"cannot connect to {address}: {' '.join(str(exc).split())}")
    return exc
