"""A newcomer's path from the wheel alone: the wheel built as a release is, installed (not
editable) into a fresh virtualenv, and run from a directory outside the checkout with no
testbed configured. From that installed copy: both site-image recipes render, the
first-site commands of docs/first-site.md (the README's text) run as written against the
testbed's access point, up to the export's dry run (which logs in to the site: it runs
at the testbed's emulated site, the one SSH can reach here), and every file that
`--help`, the docs and the README name is in the installed package.

The virtualenv borrows its dependencies (htcondor, click, pydantic, fabric, ...) from the
test's own environment through a path file, read-only: no package index is reachable
from the tests, and lumberjack itself comes only from the wheel (checked).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import load_fixture_module
from journey import as_submitter, make_job_dir, submit_as

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Installed:
    venv: Path
    package: Path  # lumberjack/ in the venv's site-packages
    outside: Path  # the working directory, outside the checkout
    env: dict[str, str]

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.venv / "bin" / args[0]), *args[1:]], cwd=self.outside,
                              env={**self.env, **env}, capture_output=True, text=True)  # fmt: skip


@pytest.fixture(scope="module")
def installed(access_point, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("first-site")
    wheel = load_fixture_module("wheel_build").checkout_wheel(work / "build")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    subprocess.run([*pip, str(wheel)], check=True)
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site_packages = Path(
        subprocess.check_output([str(venv / "bin" / "python"), "-c", purelib], text=True).strip()
    )
    (site_packages / "borrowed-dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    outside = work / "newcomer"
    (outside / "home").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LUMBERJACK_", "PYTHON", "VIRTUAL_ENV"))}  # fmt: skip
    env.update(HOME=str(outside / "home"), LUMBERJACK_STATE_DIR=str(work / "state"))
    found = subprocess.check_output(
        [str(venv / "bin" / "python"), "-c", "import lumberjack; print(lumberjack.__file__)"],
        cwd=outside, env=env, text=True,
    )  # fmt: skip
    package = Path(found.strip()).parent
    assert package == site_packages / "lumberjack"  # the wheel's copy, not the checkout
    return Installed(venv, package, outside, env)


def test_both_recipes_render_from_the_installed_package(installed: Installed) -> None:
    for runtime, files in (("apptainer", ["lumberjack-site.def"]),
                           ("podman-hpc", ["Containerfile", "setup.sh"])):  # fmt: skip
        done = installed.run("condor_lumberjack", "sites", "image", "build", "--runtime", runtime,
                             "--output", runtime, "--dry-run", "--json")  # fmt: skip
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert [Path(f).name for f in answer["files"]] == files and not answer["built"]
        text = (installed.outside / runtime / files[0]).read_text()
        assert "condor apptainer squashfuse busybox-static procps ca-certificates" in text
        assert f"recipe {answer['recipe']}" in text
        for name in files:  # written where asked, in the user's directory
            assert Path(answer["files"][files.index(name)]).parent == installed.outside / runtime


def first_site_commands(doc: str) -> list[str]:
    """The condor_lumberjack commands of "A first real site", joined across `\\`, up to
    and including the export's dry run."""
    section = doc.split("## A first real site", 1)[1]
    blocks = re.findall(r"```\n(.*?)```", section, re.S)
    lines = " ".join(blocks).replace("\\\n", " ").splitlines()
    commands = [" ".join(line.split()) for line in lines if line.strip().startswith("condor_")]
    last = next(i for i, c in enumerate(commands) if " export " in f" {c} " and "--dry-run" in c)
    return commands[: last + 1]


def test_the_first_site_commands_run_up_to_the_dry_run(installed: Installed) -> None:
    doc = (installed.package / "docs" / "first-site.md").read_text()
    commands = first_site_commands(doc)
    assert [c.split()[1:3] for c in commands] == [
        ["sites", "list"], ["sites", "show"], ["sites", "image"], ["sites", "image"],
        ["sites", "image"], ["sites", "check"], ["export", "-c"],
    ]  # fmt: skip
    # The doc's jobs, with a batch name of this run's own (the access point is shared).
    batch = f"first-site-{os.getpid()}"
    work = Path(os.environ["LUMBERJACK_TESTBED_DIR"]) / "work" / batch
    work.mkdir(parents=True, exist_ok=True)
    import testbed

    os.chown(work, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    cluster = submit_as("alice", make_job_dir(work), 2, batch_name=batch)
    try:
        run_first_site(installed, commands, batch)
    finally:  # the access point is shared: leave no idle jobs behind
        with as_submitter("alice"):
            import htcondor2

            htcondor2.Schedd().act(htcondor2.JobAction.Remove, f"ClusterId == {cluster}")


def run_first_site(installed: Installed, commands: list[str], batch: str) -> None:
    outputs = []
    for command in commands:
        words = shlex.split(command.replace('"calib"', f'"{batch}"'))
        testbed_env = {}
        if words[1] == "export":  # the dry run logs in: to the site SSH reaches here
            assert words[words.index("--site") + 1] == "anvil"
            words[words.index("--site") + 1] = "testbed"
            words[words.index("--walltime") + 1] = "1h"  # the testbed queue's limit
            testbed_env = {"LUMBERJACK_TESTBED_DIR": os.environ["LUMBERJACK_TESTBED_DIR"]}
            words.append("--show-script")  # the batch script the pilots get
        done = installed.run(*words, **testbed_env)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        outputs.append(done.stdout)
    listed, shown, anvil_image, perlmutter_image, vista_image, checked, plan = outputs
    assert "anvil" in listed and "testbed" not in listed  # no testbed configured
    assert "tested       end-to-end on the testbed: Slurm + Apptainer" in shown
    assert "lumberjack-site.def" in anvil_image and '"$SCRATCH/lumberjack/image/' in anvil_image
    assert "podman-hpc migrate lumberjack-site:latest" in perlmutter_image
    # Vista's queues are aarch64: its image is built for that architecture, here emulated.
    assert "--arch arm64" in vista_image and "lumberjack-site-aarch64.sif" in vista_image
    assert "matchmaking  2 jobs match the slot" in checked, checked  # the doc's jobs, matched
    assert plan.startswith("would export 2 jobs in 1 cluster of alice as 'calib'"), plan
    assert "matchmaking  2 jobs match the slot" in plan and "cis230000" in plan, plan
    assert "#SBATCH --account=cis230000" in plan and "cost  " in plan, plan
    (installed.outside / "first-site-plan.txt").write_text(plan)  # for the report
    # Nothing changed: the jobs are still the local schedd's, no export was recorded.
    listing = installed.run("condor_lumberjack", "exports", "--json")
    assert json.loads(listing.stdout)["exports"] == []


#: Names in the docs that are files of a checkout, not of the package: the project's own
#: development (its testbed, tests, benchmarks) and the repository's top-level files.
CHECKOUT_ONLY = ("containers/", "tests/", "bench/", "Makefile", "README.md", "LICENSE",
                 "SECURITY.md", "BENCHMARKS.md")  # fmt: skip
#: Example names of files you write yourself.
PLACEHOLDERS = ("site-profiles/NAME.toml", "site-profiles/foo.toml")
NAME = re.compile(r"(?<![\w/.$~-])((?:docs|site-profiles|lumberjack)/[\w./-]*\w)")
LINK = re.compile(r"\]\(([^)#\s]+)")


def installed_path(package: Path, name: str) -> Path:
    """Where a file named by its place in a checkout is in the installed package."""
    for prefix, there in (("docs", package / "docs"),
                          ("site-profiles", package / "profiles" / "site-profiles"),
                          ("lumberjack", package)):  # fmt: skip
        if name == prefix or name.startswith(prefix + "/"):
            return there / name[len(prefix) :].lstrip("/")
    raise AssertionError(name)


def test_every_file_help_and_docs_name_is_installed(installed: Installed) -> None:
    helps = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c", HELP_TEXTS], cwd=installed.outside,
        env=installed.env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "docs/exit-codes.md" in helps and "sites image build" in helps
    metadata = subprocess.check_output(
        [str(installed.venv / "bin" / "python"), "-c",
         "import importlib.metadata as m; print(m.metadata('condor-lumberjack')['Description'])"],
        env=installed.env, text=True,
    )  # fmt: skip
    sources = {"--help": ("", helps), "README.md": ("", metadata)}
    for path in sorted((installed.package / "docs").glob("*.md")):
        sources[f"docs/{path.name}"] = ("docs", path.read_text())
    readme = installed.package / "profiles" / "site-profiles" / "README.md"
    sources["site-profiles/README.md"] = ("site-profiles", readme.read_text())
    named: dict[str, str] = {}
    for where, (folder, text) in sources.items():
        for match in NAME.finditer(text):
            named.setdefault(match.group(1), where)
        for link in LINK.findall(text):
            if "://" not in link and not link.startswith("mailto:"):
                named.setdefault(posixpath.normpath(posixpath.join(folder, link)), where)
    wanted = {n: w for n, w in named.items()
              if not n.startswith(CHECKOUT_ONLY) and n not in PLACEHOLDERS}  # fmt: skip
    assert {"docs/exit-codes.md", "docs/cron/crontab", "site-profiles/README.md"} <= set(wanted)
    missing = {n: w for n, w in wanted.items() if not installed_path(installed.package, n).exists()}
    assert missing == {}


#: Every command's --help, from one process (the installed CLI's own click tree).
HELP_TEXTS = """
import importlib, click
from lumberjack.cli import cli, COMMAND_MODULES
for module in set(COMMAND_MODULES.values()):
    importlib.import_module("lumberjack.cli." + module)
def walk(command, path):
    ctx = click.Context(command, info_name=" ".join(path))
    print(command.get_help(ctx))
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            walk(command.get_command(ctx, name), [*path, name])
walk(cli, ["condor_lumberjack"])
"""
