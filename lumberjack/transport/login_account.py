"""The site account a profile logs in to, named by what the SSH login reaches (its user
and host), never by the profile's name: two profiles of one account name one account."""

from __future__ import annotations

from fabric import Connection

from lumberjack.profiles.model import SiteProfile


def login_account(profile: SiteProfile) -> str:
    """`user@host` of the profile's login, resolved as the SSH client resolves it: the
    host a `Host` alias of the SSH configuration points at, lower-case and without a
    trailing dot; the profile's user, or else the configuration's, or this process's.
    The port is left out: it picks an sshd, not an account (testbed on 2222 and
    testbed-mfa on 2223 reach the same files)."""
    # Only builds the connection's settings: nothing is opened.
    login = Connection(profile.login_host, user=profile.user, port=profile.port)
    host = str(login.host).lower().rstrip(".")
    return f"{login.user}@{host}"
