"""Each command's module is imported only when that command runs: one table says which
module defines which command, and it must match what the modules register."""

import importlib
import subprocess
import sys

from lumberjack.cli import COMMAND_MODULES, cli


def test_the_table_names_every_command_and_only_those() -> None:
    for module in set(COMMAND_MODULES.values()):
        importlib.import_module(f"lumberjack.cli.{module}")
    assert set(cli.commands) == set(COMMAND_MODULES)
    for name, command in cli.commands.items():
        assert command.callback is not None
        assert command.callback.__module__ == f"lumberjack.cli.{COMMAND_MODULES[name]}", name


def _modules_after(*args: str) -> set[str]:
    script = (
        "import sys\n"
        "from lumberjack.cli import cli\n"
        "try:\n"
        "    cli(sys.argv[1:], prog_name='condor_lumberjack', standalone_mode=False)\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, check=True
    )
    return set(done.stderr.split())


def test_import_and_inspect_never_load_the_ssh_libraries() -> None:
    for args in (["import", "--help"], ["inspect", "--help"], ["unexport", "--help"]):
        loaded = _modules_after(*args)
        assert not {"paramiko", "fabric", "lumberjack.transport"} & loaded, args


def test_help_lists_every_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lumberjack", "--help"], capture_output=True, text=True, check=True
    )
    commands = done.stdout.split("Commands:")[1].split("Exit codes")[0]
    listed = {line.split()[0] for line in commands.splitlines() if line.strip()}
    assert listed == set(COMMAND_MODULES)


def test_import_never_loads_the_site_profiles_models() -> None:
    # `import` is a module of its own: its start-up is part of every import's time.
    loaded = _modules_after("import", "--help")
    assert not {"pydantic", "lumberjack.profiles.model", "lumberjack.ap.export"} & loaded
