"""The `condor_lumberjack` command line: thin click commands that parse, call and print."""

from __future__ import annotations

import importlib
from pathlib import Path

import click

from lumberjack import __version__
from lumberjack.cli.common import LumberjackGroup, exit_codes_help
from lumberjack.errors import exit_on_ctrl_c

#: The module (in lumberjack/cli/) that defines each command; importing it registers the
#: command on `cli`. A run imports only its command's module, so `status` or `import`
#: never loads the SSH libraries it does not use; --help imports them all.
COMMAND_MODULES = {
    "export": "exports_cmd",
    "import": "import_cmd",
    "unexport": "exports_cmd",
    "exports": "exports_cmd",
    "inspect": "inspect_cmd",
    "logs": "logs_cmd",
    "lease": "lease_cmd",
    "leases": "lease_cmd",
    "login": "login_cmd",
    "logout": "login_cmd",
    "ship": "steps_cmd",
    "launch": "steps_cmd",
    "status": "status_cmd",
    "fetch": "steps_cmd",
    "cleanup": "steps_cmd",
    "sync": "steps_cmd",
    "run": "steps_cmd",
    "sites": "sites_cmd",
    "manpage": "manpage",
}


class LazyCommands(LumberjackGroup):
    """The top-level group: each command's module is imported when the command is asked
    for (click's documented way to load subcommands lazily)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMAND_MODULES) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            importlib.import_module(f"lumberjack.cli.{COMMAND_MODULES[cmd_name]}")
        return self.commands.get(cmd_name)


@click.group(
    cls=LazyCommands,
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
    epilog=exit_codes_help()
    + "\n\n"
    + (
        "\b\nThe docs/ and site-profiles/ files named in --help are installed with the "
        f"package:\n  {Path(__file__).resolve().parents[1] / 'docs'}\n"
        f"  {Path(__file__).resolve().parents[1] / 'profiles' / 'site-profiles'}"
    ),
)
@click.version_option(__version__, prog_name="condor_lumberjack")
def cli() -> None:
    """Run jobs from your HTCondor queue on an HPC allocation and bring the results home.

    \b
    Typical journey:
      condor_lumberjack sites check perlmutter --nodes 4 --walltime 2h --allocation m1234
      condor_lumberjack export -c 'JobBatchName == "calib"' --site perlmutter \\
          --allocation m1234 --name calib
      condor_lumberjack login polaris   # MFA sites: once a day, asks for the code
      condor_lumberjack sync            # from cron, every minute
      condor_lumberjack status calib

    \b
    The prototype's spellings work too:
      condor_lumberjack --export -jobconstraint EXPR -out DIR -remotespool PATH
      condor_lumberjack --import -in DIR
    """


def main() -> None:
    exit_on_ctrl_c()  # see lumberjack/__main__.py (this module's imports came before)
    from lumberjack.core import crashpoints

    try:
        crashpoints.armed()  # a misspelt crash point fails here, not silently later
    except crashpoints.UnknownCrashPoint as exc:
        raise SystemExit(f"condor_lumberjack: {exc}") from None
    cli(prog_name="condor_lumberjack")
