"""The `condor_lumberjack` command line: thin click commands that parse, call and print."""

from __future__ import annotations

import click

from lumberjack import __version__
from lumberjack.cli.common import LumberjackGroup


@click.group(
    cls=LumberjackGroup,
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
@click.version_option(__version__, prog_name="condor_lumberjack")
def cli() -> None:
    """Run jobs from your HTCondor queue on an HPC allocation and bring the results home.

    \b
    Typical journey:
      condor_lumberjack sites check perlmutter --nodes 4 --walltime 2h
      condor_lumberjack export -c 'JobBatchName == "calib"' --site perlmutter --name calib
      condor_lumberjack login polaris   # MFA sites: once a day, asks for the code
      condor_lumberjack sync            # from cron, every minute
      condor_lumberjack status calib

    \b
    The prototype's spellings work too:
      condor_lumberjack --export -jobconstraint EXPR -out DIR -remotespool PATH
      condor_lumberjack --import -in DIR
    """


def _register() -> None:
    # Each command lives in its own module; importing registers it on `cli`.
    from lumberjack.cli import (
        export_cmd,  # noqa: F401
        inspect_cmd,  # noqa: F401
        lease_cmd,  # noqa: F401
        login_cmd,  # noqa: F401
        site_cmd,  # noqa: F401
        sites_cmd,  # noqa: F401
    )


def main() -> None:
    from lumberjack.core import crashpoints

    try:
        crashpoints.armed()  # a misspelt crash point fails here, not silently later
    except crashpoints.UnknownCrashPoint as exc:
        raise SystemExit(f"condor_lumberjack: {exc}") from None
    _register()
    cli(prog_name="condor_lumberjack")
