"""`login` and `logout`: the OpenSSH master a person opens once for an MFA site."""

from __future__ import annotations

import click

from lumberjack.cli import cli
from lumberjack.cli.common import emit, json_option
from lumberjack.cli.completion import complete_site
from lumberjack.core.units import format_walltime, parse_walltime
from lumberjack.errors import BadInput
from lumberjack.profiles.sites import find_profile
from lumberjack.transport import login


def _persist_seconds(text: str | None) -> int:
    if text is None:
        return login.DEFAULT_PERSIST_S
    try:
        seconds = parse_walltime(text)
    except ValueError as exc:
        raise BadInput(f"--persist {text!r} {exc}; write e.g. --persist 12h") from None
    if seconds <= 0:
        raise BadInput("--persist must be longer than 0; write e.g. --persist 12h")
    return seconds


@cli.command("login")
@click.argument("site", shell_complete=complete_site)
@click.option(
    "--persist",
    metavar="DURATION",
    help=f"How long the login lasts [default: {format_walltime(login.DEFAULT_PERSIST_S)}].",
)
@json_option
def login_command(site: str, persist: str | None, as_json: bool) -> None:
    """Log in to SITE once: ssh asks on this terminal for what the site wants (one-time
    code, password, key passphrase), then keeps the connection open in the background.
    Every later command, and `sync` from cron, rides it without asking.

    A site that allows no connection sharing keeps no login: use `sync --watch` there.

    \b
    Examples:
      condor_lumberjack login polaris --persist 12h   # each morning, in a terminal
      * * * * * condor_lumberjack sync --log-file ~/lumberjack-sync.log >/dev/null  # cron
    """
    profile = find_profile(site)
    state = login.open_login(profile, _persist_seconds(persist))
    emit(as_json, {"ok": True, "site": site, **state.to_json()},
         f"logged in to {site}: {state.describe()}")  # fmt: skip


@cli.command("logout")
@click.argument("site", shell_complete=complete_site)
@json_option
def logout_command(site: str, as_json: bool) -> None:
    """Close SITE's login (its background SSH connection).

    \b
    Example:
      condor_lumberjack logout polaris
    """
    was_live = login.close_login(find_profile(site))
    emit(as_json, {"ok": True, "site": site, "was_live": was_live},
         f"logged out of {site}" if was_live else f"no login to {site} was live")  # fmt: skip
