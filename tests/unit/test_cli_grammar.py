"""One grammar for every command: input is checked before a schedd or a site is asked
(no schedd runs here), usage errors are JSON under --json wherever --json stands, every
--json answer is an object, unknown names exit 2, defaults are in --help, durations
read alike, the prototype's spellings work on `run` too, and `inspect` refuses what is
not a regular file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from lumberjack.cli import cli
from lumberjack.cli.request_options import Duration

sys.path.insert(0, str(Path(__file__).parent))
import state_sweep  # noqa: E402


@pytest.fixture
def no_schedd(tmp_path: Path) -> dict[str, str]:
    """An environment where no schedd can be found and the state dir is fresh."""
    return state_sweep.environment(tmp_path, tmp_path / "state")


def _lumberjack(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lumberjack", *args], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


BAD_INPUT = [
    (["export", "-c", "JobBatchName ==", "--site", "testbed"], "--constraint"),
    (["export", "-jobconstraint", "a &&& b", "--out", "x", "-remotespool", "/s"], "--constraint"),
    (["export", "--ids", "12.x", "--site", "testbed"], "12.x"),
    (["export", "--ids", "12", "--site", "nosuch"], "nosuch"),
    (["export", "--ids", "12", "--site", "testbed", "--walltime", "2x"], "--walltime"),
    # A bare number: Slurm would read minutes, a person means hours; no guess either way.
    (
        ["export", "--ids", "12", "--site", "testbed", "--walltime", "6"],
        "--walltime 6 has no unit: write 6h, 6m, 360m or 06:00:00",
    ),
    (["export", "--ids", "12", "--site", "testbed", "--idle-shutdown", "soon"], "soon"),
    (["export", "--ids", "12", "--site", "testbed", "--name", "a/b"], "a/b"),
    (["export", "--ids", "12", "--out", "x"], "--remote-spool"),
    (["run", "-c", "JobBatchName ==", "--site", "testbed"], "--constraint"),
    (["run", "-ids", "12", "--site", "nosuch"], "nosuch"),
    (["run", "--ids", "12", "--site", "testbed", "--timeout", "2x"], "--timeout"),
    (["run", "--ids", "12", "--site", "testbed", "--poll", "often"], "--poll"),
    (["run", "--ids", "12", "--site", "testbed", "--memory", "lots"], "--memory"),
    (["sync", "--name", "typo"], "typo"),
    (["sync", "--poll", "2x"], "--poll"),
    (["status", "typo"], "typo"),
    (["lease", "status", "typo"], "typo"),
    (["lease", "create", "pool", "--site", "nosuch"], "nosuch"),
    (["sites", "show", "nosuch"], "nosuch"),
    (["login", "nosuch"], "nosuch"),
    (["login", "testbed-mfa", "--persist", "soon"], "--persist"),
]


@pytest.mark.parametrize(("args", "named"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_named_with_exit_2_before_any_schedd(no_schedd, args, named) -> None:
    text = _lumberjack(no_schedd, *args)
    assert text.returncode == 2, text.stderr
    assert "Traceback" not in text.stderr and "cannot reach" not in text.stderr
    assert named in text.stderr
    answer = json.loads(_lumberjack(no_schedd, *args, "--json").stdout)
    assert answer["ok"] is False and named in answer["error"]


def test_good_input_goes_on_to_the_schedd_which_is_not_there(no_schedd) -> None:
    """The control for the cases above: in this environment a command that passes its
    checks does ask for the schedd (and fails to find one)."""
    done = _lumberjack(no_schedd, "export", "--ids", "12", "--site", "testbed", "--json")
    assert done.returncode == 1
    assert "cannot reach the local schedd" in json.loads(done.stdout)["error"]


def test_no_schedd_is_one_line_with_advice(no_schedd: dict[str, str], tmp_path: Path) -> None:
    no_such = str(tmp_path / "no-such-config")
    nowhere = tmp_path / "nowhere.config"
    nowhere.write_text("SCHEDD_HOST = nowhere.invalid\nCOLLECTOR_HOST = 127.0.0.1:1\n")
    export = ["export", "--ids", "12", "--site", "testbed"]
    missing = _lumberjack({**no_schedd, "CONDOR_CONFIG": no_such}, *export)
    assert missing.returncode == 7 and missing.stdout == ""
    assert missing.stderr == (
        f"error: CONDOR_CONFIG names {no_such}, which does not exist: point it at the access "
        "point's HTCondor configuration (or unset it for the default)\n"
    )
    for config, where in ((no_schedd["CONDOR_CONFIG"], "the local schedd"),
                          (str(nowhere), "the schedd nowhere.invalid (SCHEDD_HOST)")):  # fmt: skip
        done = _lumberjack({**no_schedd, "CONDOR_CONFIG": config}, *export)
        assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith(f"error: cannot reach {where}: ")
        assert "`condor_status -schedd`" in done.stderr
        assert done.stderr.endswith(f"HTCondor reads CONDOR_CONFIG={config}\n")


@pytest.mark.parametrize(
    "args",
    [["export", "--bogus", "--json"], ["sites", "check", "--json"], ["ship", "--json"],
     ["run", "--nodes", "many", "--json"], ["inspect", "--max-size"], ["--json", "nosuchcmd"],
     ["sync", "--json", "--poll"]],
)  # fmt: skip
def test_usage_errors_are_json_objects_under_json(args) -> None:
    result = CliRunner().invoke(cli, args)
    if "--json" not in args:  # no --json: click's own text on stderr
        assert result.exit_code == 2 and "Error:" in result.stderr
        return
    assert result.exit_code == 2
    answer = json.loads(result.stdout)
    assert answer["ok"] is False and answer["error"]
    assert result.stderr == ""


def test_every_json_answer_is_an_object(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LUMBERJACK_STATE_DIR", str(tmp_path / "state"))
    for args in (["sites", "list"], ["sites", "show", "testbed"], ["sites", "check", "testbed"],
                 ["exports"], ["leases"]):  # fmt: skip
        result = CliRunner().invoke(cli, [*args, "--json"])
        assert result.exit_code == 0, result.output
        assert isinstance(json.loads(result.stdout), dict), args


def _leaf_commands() -> list[tuple[list[str], click.Command]]:
    found = []
    for words in state_sweep.commands():
        path = [w for w in words if w != "nosuch" and not w.startswith("-")]
        command: click.Command = cli
        for word in path:
            command = command.get_command(click.Context(command), word)  # type: ignore[attr-defined]
        found.append((path, command))
    return found


#: Options whose absence chooses what the command does: there is no default to show.
NO_DEFAULT = {"constraint", "ids", "site", "lease", "out", "remote_spool", "in_dir"}


def test_every_option_with_a_default_shows_it_in_help() -> None:
    missing = []
    for path, command in _leaf_commands():
        ctx = click.Context(command, info_name=" ".join(path), show_default=True)
        for param in command.params:
            if not isinstance(param, click.Option) or param.is_flag or param.required:
                continue
            record = param.get_help_record(ctx)
            if param.name not in NO_DEFAULT and record and "default" not in record[1].lower():
                missing.append(f"{' '.join(path)} {param.opts[0]}")
    assert not missing


def test_the_group_shows_defaults_for_every_command() -> None:
    assert cli.context_settings.get("show_default") is True


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 30), ("30s", 30), ("2m", 120), ("1h30m", 5400), ("01:00:00", 3600), ("1d", 86400)],
)
def test_durations_read_alike(text: str, seconds: int) -> None:
    assert Duration().convert(text, None, None) == seconds
    assert Duration("m").convert("90", None, None) == 5400


def test_run_takes_the_prototypes_spellings_and_durations() -> None:
    run = cli.get_command(click.Context(cli), "run")
    assert run is not None
    ctx = run.make_context("run", ["-jobconstraint", "Owner == 1", "-ids", "7", "--poll", "2m",
                                   "--timeout", "4h"])  # fmt: skip
    assert ctx.params["constraint"] == "Owner == 1" and ctx.params["ids"] == ("7",)
    assert (ctx.params["poll"], ctx.params["timeout"]) == (120, 4 * 3600)
    sync = cli.get_command(click.Context(cli), "sync")
    assert sync is not None
    assert sync.make_context("sync", ["--poll", "1m"]).params["poll"] == 60


def test_sites_list_fits_100_columns_without_wide() -> None:
    narrow = CliRunner().invoke(cli, ["sites", "list"]).stdout.splitlines()
    wide = CliRunner().invoke(cli, ["sites", "list", "--wide"]).stdout.splitlines()
    assert max(map(len, narrow)) <= 100 < max(map(len, wide))


def test_inspect_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        result = CliRunner().invoke(cli, ["inspect", path, "--json"])
        assert result.exit_code == 2
        assert (
            json.loads(result.stdout)["error"]
            == f"{path}: is not a regular file, not a job_queue.log"
        )


def test_inspect_refuses_a_log_above_its_size_bound(tmp_path: Path) -> None:
    big = tmp_path / "job_queue.log"
    big.write_bytes(b"105 \n106 \n" * (240 * 1024))  # 2.4 MB of a valid (empty) log
    refused = CliRunner().invoke(cli, ["inspect", str(big), "--max-size", "2MB"])
    assert refused.exit_code == 2 and "--max-size" in refused.stderr
    assert CliRunner().invoke(cli, ["inspect", str(big), "--max-size", "3MB"]).exit_code == 0


def test_an_unexpected_exception_is_one_line_and_exit_70(monkeypatch) -> None:
    import lumberjack.cli.sites_cmd as sites_cmd

    def broken() -> tuple:
        raise KeyError("surprise")

    monkeypatch.setattr(sites_cmd, "load_profiles", broken)
    monkeypatch.delenv("LUMBERJACK_TRACEBACK", raising=False)
    result = CliRunner().invoke(cli, ["sites", "list"])
    assert result.exit_code == 70
    assert result.stderr.count("\n") == 1 and "internal error" in result.stderr
    assert "Traceback" not in result.stderr


def test_exit_codes_are_documented_once_and_listed_in_help() -> None:
    from lumberjack.errors import EXIT_CODES

    doc = (Path(__file__).parents[2] / "docs" / "exit-codes.md").read_text()
    documented = {int(row.split("|")[1]) for row in doc.splitlines()
                  if row.startswith("|") and row.split("|")[1].strip().isdigit()}  # fmt: skip
    assert documented == set(EXIT_CODES)
    text = CliRunner().invoke(cli, ["--help"]).stdout
    for code, meaning in EXIT_CODES.items():
        assert f"{code:>3}  {meaning}" in text


def test_shell_completion_works_as_documented(tmp_path: Path) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "shell-completion.md").read_text()
    assert "_CONDOR_LUMBERJACK_COMPLETE=bash_source condor_lumberjack" in doc
    env = {**os.environ, "_CONDOR_LUMBERJACK_COMPLETE": "bash_source"}
    script = subprocess.run([sys.executable, "-c", "from lumberjack.cli import main; main()"],
                            env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert script.returncode == 0 and "_condor_lumberjack_completion" in script.stdout
    env.update(_CONDOR_LUMBERJACK_COMPLETE="bash_complete", COMP_WORDS="condor_lumberjack si",
               COMP_CWORD="1")  # fmt: skip
    words = subprocess.run([sys.executable, "-c", "from lumberjack.cli import main; main()"],
                           env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert words.stdout.split() == ["plain,sites"]


def test_every_long_option_takes_one_dash_too(no_schedd: dict[str, str]) -> None:
    assert invoke_text("sites", "list", "-json") == invoke_text("sites", "list", "--json")
    assert invoke_text("sites", "show", "perlmutter", "-json").startswith('{"name": "perlmutter"')
    unknown = CliRunner().invoke(cli, ["export", "--ids", "12", "-site", "nosuch"])
    assert unknown.exit_code == 2 and "unknown site 'nosuch'" in unknown.stderr
    # Each word read as its option: the command passes its checks and asks for the schedd.
    done = _lumberjack(no_schedd, "export", "-c", "true", "-site", "testbed", "-name", "one",
                       "-dry-run", "-json")  # fmt: skip
    assert (
        done.returncode == 1 and "cannot reach the local schedd" in json.loads(done.stdout)["error"]
    )
    assert CliRunner().invoke(cli, ["sites", "list", "-h"]).stdout.startswith("Usage:")


@pytest.mark.parametrize(("args", "typed"), [(["-constraint", "X"], "-constraint"),
                                             (["sites", "list", "-jsn"], "-jsn")])  # fmt: skip
def test_an_unknown_option_is_named_as_typed(args: list[str], typed: str) -> None:
    result = CliRunner().invoke(cli, args)  # click alone names -c and -j
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == f"Error: No such option '{typed}'."


def invoke_text(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_state_directory_that_is_a_file_is_called_a_file(no_schedd, tmp_path: Path) -> None:
    state = tmp_path / "state-file"
    state.write_text("mine\n")
    done = _lumberjack({**no_schedd, "LUMBERJACK_STATE_DIR": str(state)}, "status")
    assert done.returncode == 6 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"error: state directory {state} is a file, not a directory;")
    assert state.read_text() == "mine\n"


def test_inspect_of_a_file_that_is_no_log_shows_its_line_once(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello world\nnot a log\n")
    result = CliRunner().invoke(cli, ["inspect", str(notes)])
    assert result.exit_code == 2
    assert result.stderr == f'error: {notes} line 1: expected an op code 101-107: "hello world"\n'


def test_sites_show_names_the_profile_by_its_absolute_path(monkeypatch) -> None:
    monkeypatch.chdir("/")
    shown = invoke_text("sites", "show", "perlmutter").splitlines()
    path = next(line.split()[1] for line in shown if line.split()[:1] == ["profile"])
    assert Path(path).is_absolute() and Path(path).name == "perlmutter.toml"


def test_a_missing_site_profiles_directory_is_a_setup_mistake(monkeypatch, tmp_path: Path) -> None:
    missing = tmp_path / "my-sites-typo"
    monkeypatch.setenv("LUMBERJACK_SITE_PROFILES", str(missing))
    result = CliRunner().invoke(cli, ["sites", "list"])
    assert result.exit_code == 7 and result.stdout == ""
    assert result.stderr == (
        f"error: LUMBERJACK_SITE_PROFILES names {missing}, which is not a directory: "
        "fix or unset it\n"
    )
