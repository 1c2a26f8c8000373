"""Every command the README, docs/ and `--help` show runs as written.

Shell examples are the lines of fenced code blocks (and of each command's `--help`
examples) that run `condor_lumberjack`, `make`, `cp` or a crontab entry. Each
`condor_lumberjack` line is checked by what it needs:
- `sites ...` and `sync` (on an empty ledger) run for real: they need no site;
- a command naming a real site (`--site perlmutter ...`) must hold a request that site
  accepts: its request flags are run through `sites check SITE ...`, which exits 0;
- every line is parsed by the real command line (subcommands, option names and the
  number of arguments; `--help` appended so nothing acts), which exits 0.
Other programs: `make TARGET` names a Makefile target, `cp` copies files that exist, and
a few (pip, systemctl, ...) are only named here, so a new kind of example fails until
someone decides how to check it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from lumberjack.cli import COMMAND_MODULES, cli
from lumberjack.profiles.sites import find_profile

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", REPO / "SECURITY.md", *sorted((REPO / "docs").rglob("*.md"))]
CRONTAB = REPO / "docs" / "cron" / "crontab"
REQUEST_FLAGS = {"--nodes", "--cores", "--memory", "--gpus", "--walltime", "--queue",
                 "--allocation", "--pilots", "--idle-shutdown"}  # fmt: skip
ONLY_NAMED = {"pip", "systemctl", "loginctl", "mkdir", "condor_submit", "ssh"}
SCHEDULE = re.compile(r"^(\S+\s+){5}(?=condor_lumberjack )")


def _logical_lines(text: str) -> list[str]:
    """Lines with backslash continuations joined."""
    joined, current = [], ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        joined.append(current + line)
        current = ""
    return joined


def _fenced_blocks(text: str) -> list[str]:
    blocks, inside, lang, lines = [], False, "", []
    for line in text.splitlines():
        if line.strip().startswith("```"):
            if inside and lang in ("", "sh", "bash", "console", "shell"):
                blocks.append("\n".join(lines))
            inside, lang, lines = not inside, line.strip()[3:].strip(), []
        elif inside:
            lines.append(line.strip())
    return blocks


def _commands(text: str) -> list[tuple[list[str], str]]:
    """Each example line as argv; from `condor_lumberjack` on where a line holds one
    after something else (a DAG's SCRIPT line), a crontab schedule dropped."""
    found = []
    for line in _logical_lines(text):
        line = SCHEDULE.sub("", line.strip())
        if "condor_lumberjack " in line and not line.startswith("condor_lumberjack "):
            if line.split()[0] in ("SCRIPT", "condor_submit", "&&") or "&&" in line:
                line = line[line.index("condor_lumberjack ") :]
        if not line or line.split()[0] not in ("condor_lumberjack", "make", "cp", *ONLY_NAMED):
            continue
        words = shlex.split(line, comments=True)
        found.append((words[: words.index("&&")] if "&&" in words else words, line))
    return found


Example = tuple[str, list[str], str]  # where, argv, the line as written


def _doc_examples() -> list[Example]:
    examples = []
    for doc in DOCS:
        for block in _fenced_blocks(doc.read_text()):
            where = doc.relative_to(REPO).as_posix()
            examples += [(where, argv, line) for argv, line in _commands(block)]
    examples += [("docs/cron/crontab", *found) for found in _commands(CRONTAB.read_text())]
    return examples


def _help_examples() -> list[Example]:
    # Sorted: the import order decides the commands' order, and so the tests' (pytest-xdist
    # needs every worker to collect the same list).
    for module in sorted(set(COMMAND_MODULES.values())):
        __import__(f"lumberjack.cli.{module}")
    examples = []

    def visit(command: click.Command, path: list[str]) -> None:
        text = (command.help or "").replace("\\b", "")
        where = " ".join(["condor_lumberjack", *path, "--help"])
        examples.extend((where, argv, line) for argv, line in _commands(text))
        for name, sub in getattr(command, "commands", {}).items():
            visit(sub, [*path, name])

    visit(cli, [])
    return examples


EXAMPLES = _doc_examples() + _help_examples()


def test_the_examples_are_found():
    where = {place for place, _, _ in EXAMPLES}
    assert {"README.md", "docs/mfa-and-cron.md", "docs/operations.md"} <= where
    assert "condor_lumberjack export --help" in where
    runs = [argv for _, argv, _ in EXAMPLES if argv[0] == "condor_lumberjack"]
    assert len(runs) > 60
    readme = [argv for where, argv, _ in EXAMPLES if where == "README.md"]
    assert ["make", "demo"] in readme and ["make", "test"] in readme


@pytest.fixture()
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LUMBERJACK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("LUMBERJACK_SITE_PROFILES", raising=False)
    monkeypatch.setenv("LUMBERJACK_TESTBED_DIR", str(tmp_path / "testbed"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


#: The options that select jobs (cli/common.py's selection_options).
SELECTING = {"-c", "--constraint", "-jobconstraint", "--ids", "-ids"}


def _run(args: list[str]):
    return CliRunner().invoke(cli, args, prog_name="condor_lumberjack")


def _site_request(args: list[str]) -> tuple[str, list[str]] | None:
    """(site, its request flags) when the command names a real site."""
    if "--site" not in args or "sites" in args[:1]:
        return None
    site = args[args.index("--site") + 1]
    if find_profile(site).path.stem.startswith("testbed"):
        return None  # the testbed's requests run for real in the integration tests
    flags: list[str] = []
    for index, word in enumerate(args):
        if word in REQUEST_FLAGS:
            flags += [word, args[index + 1]]
    return site, flags


def _shell(line: str, home: Path):
    """Run `line` as cron or a person would: sh, the virtualenv's bin/ on PATH."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env["HOME"] = str(home)
    return subprocess.run(["sh", "-c", line], env=env, capture_output=True, text=True)


@pytest.mark.parametrize(
    "where,argv,line", EXAMPLES, ids=[f"{w}: {' '.join(a)[:70]}" for w, a, _ in EXAMPLES]
)
def test_the_example_runs_as_written(where, argv, line, isolated):
    if argv[0] == "make":
        targets = re.findall(r"^([a-z-]+):", (REPO / "Makefile").read_text(), re.M)
        assert argv[1] in targets, f"{where}: no make target {argv[1]}"
        return
    if argv[0] == "cp":
        for source in argv[1:-1]:
            assert (REPO / source).is_file(), f"{where}: {source} does not exist"
        return
    if argv[0] in ONLY_NAMED:
        return
    args = [word.replace("~", str(isolated / "home"), 1) if word.startswith("~") else word
            for word in argv[1:]]  # fmt: skip
    if args[:1] == ["sync"] and "--watch" not in args:  # on an empty ledger, for real
        (isolated / "home").mkdir(exist_ok=True)
        done = _shell(line, isolated / "home")
        assert done.returncode == 0, f"{where}: {line}\n{done.stdout}{done.stderr}"
        return
    # `sites check SITE -c ...` asks the local schedd: run for real in the integration tests
    if (args[:1] == ["sites"] and not SELECTING.intersection(args)) or args == ["--version"]:
        result = _run(args)
        assert result.exit_code == 0, f"{where}: {' '.join(argv)}\n{result.output}"
        return
    request = _site_request(args)
    if request is not None:
        site, flags = request
        result = _run(["sites", "check", site, *flags])
        assert result.exit_code == 0, f"{where}: {' '.join(argv)}\n{result.output}"
    result = _run([*args, "--help"])
    assert result.exit_code == 0, f"{where}: {' '.join(argv)}\n{result.output}"
    assert "Usage:" in result.output


def test_a_wrong_example_would_fail(isolated):
    """The checks above catch what they are for: a polaris request with no
    allocation, an unknown option."""
    assert _site_request(["export", "--site", "perlmutter", "--nodes", "4"]) == (
        "perlmutter", ["--nodes", "4"])  # fmt: skip
    assert _run(["sites", "check", "polaris", "--nodes", "2"]).exit_code == 2
    assert _run(["export", "--colour", "red", "--help"]).exit_code == 2


def test_every_relative_link_in_the_docs_resolves():
    # docs/jobs.md ("What jobs can run where") is written on another branch
    missing = []
    for doc in [*DOCS, REPO / "site-profiles" / "README.md"]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (doc.parent / target).resolve()
            if not path.exists() and path != (REPO / "docs" / "jobs.md"):
                missing.append(f"{doc.relative_to(REPO)}: {target}")
    assert missing == []


def test_the_readme_is_short():
    assert len((REPO / "README.md").read_text().splitlines()) <= 250


def test_the_install_lines_work_from_inside_the_checkout() -> None:
    top = Path(__file__).parents[2]
    assert (top / "pyproject.toml").is_file()  # what `pip install .` reads, in the checkout
    for doc in ("README.md", "docs/first-site.md"):
        text = (top / doc).read_text()
        assert "pip install ./condor_lumberjack" not in text and "bin/pip install .\n" in text
        assert "with timings" not in text  # first-site.md gives none
