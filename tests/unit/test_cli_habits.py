"""HTCondor's habits on the command line: condor_q's spellings of -constraint, `status`
with no name and with a job id, the exit code of a setup mistake (7) beside a passing
site failure (3), tab completion of names, the generated man page, and human output that
never shows a Python repr."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from journey import PYTHON_REPR  # the same check every integration test's CLI run makes

from lumberjack.cli import COMMAND_MODULES, cli
from lumberjack.cli import steps_cmd as steps_cmd
from lumberjack.cli.common import failure, text_of
from lumberjack.core.setup_failures import is_setup_failure
from lumberjack.errors import EXIT_CODES, LoginNeeded, RemoteError, SetupError
from lumberjack.profiles.sites import find_profile
from lumberjack.state import handback, lifecycle, steps, sync
from lumberjack.state.ledger import Ledger
from lumberjack.transport import login


def load_fixture(name: str):  # -> module
    from conftest import load_fixture_module

    return load_fixture_module(name)


fake = load_fixture("fake_site")


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setenv("LUMBERJACK_STATE_DIR", str(tmp_path / "state"))
    return Ledger()


@pytest.fixture
def at_site(ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Export "calib" (jobs 7.0, 7.1) exported to the fake site; every command's site
    connection is that site."""
    record, site, schedd = fake.exported(ledger, tmp_path, load_fixture("site_bundle"))

    @contextlib.contextmanager
    def site_for(_record, **_):
        yield site

    monkeypatch.setattr(steps, "site_for", site_for)
    return record, site, schedd


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


# ---- -constraint and -const, as condor_q spells them ---------------------------------


@pytest.mark.parametrize("spelling", ["-constraint", "-const", "-c", "--constraint",
                                      "-jobconstraint"])  # fmt: skip
@pytest.mark.parametrize("command", [["export"], ["run"], ["sites", "check", "testbed"]])
def test_constraint_spellings_reach_the_constraint(command: list[str], spelling: str) -> None:
    *group, name = command[:2] if command[0] == "sites" else command
    target = cli
    ctx = click.Context(cli)
    for word in [*group, name]:
        target = target.get_command(ctx, word)  # type: ignore[attr-defined]
    args = [*command[2:], spelling, 'Owner == "bob"']
    parsed = target.make_context(name, args)
    assert parsed.params["constraint"] == 'Owner == "bob"'


def test_constraint_is_not_read_as_c_onstraint() -> None:
    result = invoke("sites", "check", "testbed", "-constraint", "Owner ==")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --constraint 'Owner ==' is not a ClassAd expression")


# ---- status: every export, one export, a job id ----------------------------------------


def test_status_without_a_name_lists_every_export_from_the_ledger(at_site) -> None:
    record, site, _ = at_site
    ledger = Ledger()
    empty = invoke("status")
    assert "calib" in empty.stdout and empty.stdout.split("\n")[1].split()[-1] == "-"
    lifecycle.ship(ledger, site, record)
    lifecycle.launch(ledger, site, ledger.get("calib"))
    site.start("7.1")
    lifecycle.refresh_status(ledger, site, ledger.get("calib"))  # as sync does each minute
    result = invoke("status")
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split()[:4] == ["NAME", "PHASE", "SITE", "JOBS"]
    assert row.split()[:6] == ["calib", "running", "testbed", "2", "1", "idle,"]
    assert "1 running (" in row and " UTC)" in row
    answer = json.loads(invoke("status", "--json").stdout)
    assert answer["exports"][0]["last_status"]["jobs"] == {"idle": 1, "running": 1}
    assert site.connection.commands.count("status") == 0  # no site asked for the overview


def test_status_of_a_job_id_names_the_export_site_and_state(at_site) -> None:
    record, site, _ = at_site
    ledger = Ledger()
    lifecycle.ship(ledger, site, record)
    lifecycle.launch(ledger, site, ledger.get("calib"))
    site.start("7.1")
    lifecycle.refresh_status(ledger, site, ledger.get("calib"))
    mixed = invoke("status", "7.1")
    assert mixed.exit_code == 0, mixed.output
    assert mixed.stdout.splitlines()[0] == (
        f"job 7.1: export calib (phase running, site testbed, owner {record.owner})"
    )
    assert mixed.stdout.splitlines()[1].startswith("  at the site: 1 idle, 1 running (")
    site.finish()
    lifecycle.refresh_status(ledger, site, ledger.get("calib"))
    done = json.loads(invoke("status", "7.1", "--json").stdout)
    assert done["held_by"][0] | {"last_status": None} == {
        "export": "calib", "site": "testbed", "phase": "finished", "owner": record.owner,
        "jobs": ["7.1"], "site_state": "completed", "last_status": None,
    }  # fmt: skip
    assert "  at the site: completed (last status)" in invoke("status", "7.1").stdout
    assert json.loads(invoke("status", "7", "--json").stdout)["held_by"][0]["jobs"] == [
        "7.0", "7.1",
    ]  # fmt: skip


def test_status_of_a_job_finds_any_owners_export_and_refuses_an_unknown_one(
    ledger: Ledger,
) -> None:
    # root's ledger holds the exports of every owner it exported for
    for name, owner, cluster in (("alice-run", "alice", 12), ("bob-run", "bob", 13)):
        jobs = [f"{cluster}.0", f"{cluster}.3"]
        ledger.create(name, site="testbed", bundle_dir=Path("/b"), remote_spool="/s",
                      owner=owner, clusters=[cluster], jobs=jobs)  # fmt: skip
    found = json.loads(invoke("status", "13.3", "--json").stdout)["held_by"]
    assert [(h["export"], h["owner"], h["jobs"]) for h in found] == [("bob-run", "bob", ["13.3"])]
    missing = invoke("status", "13.9")
    assert missing.exit_code == 2 and missing.stdout == ""
    assert missing.stderr.startswith("error: no export holds job 13.9 in ")
    as_json = invoke("status", "13.9", "--json")
    assert as_json.exit_code == 2 and json.loads(as_json.stdout)["ok"] is False
    # an export named like a job id is that export
    ledger.create("12", site=None, bundle_dir=Path("/b"), remote_spool="/s", owner="alice",
                  clusters=[99], jobs=["99.0"])  # fmt: skip
    assert invoke("status", "12").stdout == "12: phase selected (nothing at a site)\n"
    assert invoke("status", "nosuch").exit_code == 2


# ---- exit codes: a setup mistake (7) beside a passing failure (3) -----------------------


def test_setup_mistakes_have_their_own_exit_code() -> None:
    assert SetupError.exit_code == 7 and 7 in EXIT_CODES
    assert failure(SetupError("host key of x is not in y"))[0] == 7
    assert failure(RemoteError("cannot connect to x:22: connection refused"))[0] == 3
    assert "  7  a setup mistake" in invoke("--help").stdout
    assert "7 a setup mistake" in " ".join(invoke("sync", "--help").stdout.split())


@pytest.mark.parametrize(
    ("error", "setup"),
    [
        ("sbatch: error: Batch job submission failed: Invalid account or account/partition "
         "combination specified", True),
        ("sbatch: error: Batch job submission failed: Invalid qos specification", True),
        ("sbatch: error: invalid partition specified: debugg", True),
        ("qsub: Unknown queue", True),
        ("site image /home/u/lumberjack/image/lumberjack-site.sif not found; see the site "
         "profile's image", True),
        ("sbatch: error: Batch job submission failed: Socket timed out on send/recv "
         "operation", False),
        ("slurm_load_jobs error: Unable to contact slurm controller", False),
        ("pilots 1000 still in the batch system after 120 s", False),
    ],
)  # fmt: skip
def test_sync_exits_7_for_a_setup_mistake_and_3_for_a_passing_failure(
    ledger: Ledger, at_site, error: str, setup: bool
) -> None:
    assert is_setup_failure(error) is setup
    _, site, schedd = at_site
    site.agent_error["launch"] = error
    results = sync.sync(ledger, schedd=schedd, open_site=lambda record: site)
    assert results[0]["error"] == f"site agent launch: {error}"
    with pytest.raises(SystemExit) as ended:
        steps_cmd._sync_round(ledger, results, dry_run=False, as_json=True)
    assert ended.value.code == (7 if setup else 3)
    assert ledger.get("calib").phase == "shipped"  # nothing moved past the refusal


def test_a_setup_mistake_stays_one_when_the_site_cannot_be_reached() -> None:
    assert type(handback._unreachable(SetupError("host key"), "m")) is SetupError
    assert type(handback._unreachable(LoginNeeded("code"), "m")) is LoginNeeded
    assert type(handback._unreachable(RemoteError("down"), "m")) is RemoteError


def test_ssh_refusals_name_the_fix_and_a_key_site_no_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LUMBERJACK_TESTBED_DIR", str(tmp_path))  # the profiles' key paths
    key_site = find_profile("testbed")
    mfa_site = find_profile("testbed-mfa")
    refused = login.ssh_error(key_site, "hpcuser@10.251.0.2: Permission denied (publickey).\n",
                              login=True)  # fmt: skip
    assert isinstance(refused, SetupError) and "one-time code" not in str(refused)
    assert "identity_file" in str(refused)
    wrong_code = login.ssh_error(mfa_site, "Permission denied (keyboard-interactive).\n",
                                 login=True)  # fmt: skip
    assert type(wrong_code) is RemoteError and "code" in str(wrong_code)
    unknown = login.ssh_error(key_site, "Host key verification failed.\n")
    changed = login.ssh_error(key_site, "@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @")
    assert isinstance(unknown, SetupError) and isinstance(changed, SetupError)
    assert type(login.ssh_error(key_site, "Connection refused")) is RemoteError


# ---- tab completion, as the shell asks for it -------------------------------------------


def complete(words: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash completion offers for the last word of `words` (the real program)."""
    line = f"condor_lumberjack {words}"
    parts = line.split(" ")
    result = subprocess.run(
        [sys.executable, "-m", "lumberjack"], capture_output=True, text=True, check=True,
        env={**os.environ, **(env or {}), "_CONDOR_LUMBERJACK_COMPLETE": "bash_complete",
             "COMP_WORDS": line, "COMP_CWORD": str(len(parts) - 1)},
    )  # fmt: skip
    return [row.split(",", 1)[1] for row in result.stdout.splitlines() if "," in row]


def test_completion_of_site_export_and_queue_names(ledger: Ledger, tmp_path: Path) -> None:
    assert complete("sites show pe") == ["perlmutter"]
    assert complete("login testbed-m") == ["testbed-mfa", "testbed-mfa-nosharing"]
    assert complete("export --site testbed --queue ") == [
        q.name for q in find_profile("testbed").queues
    ]
    assert complete("sites check perlmutter --queue debug") == ["debug-cpu", "debug-gpu"]
    assert complete("export --queue ") == []  # no site named yet: no guess
    ledger.create("calib", site="testbed", bundle_dir=Path("/b"), remote_spool="/s",
                  owner="alice", clusters=[7], jobs=["7.0"])  # fmt: skip
    ledger.create("calm", site="testbed", bundle_dir=Path("/b"), remote_spool="/s",
                  owner="alice", clusters=[8], jobs=["8.0"])  # fmt: skip
    assert complete("status cal") == ["calib", "calm"]
    assert complete("fetch calm") == ["calm"]
    assert complete("sync --name calib") == ["calib"]
    # no ledger yet: nothing offered, and none created to complete
    fresh = tmp_path / "fresh-state"
    assert complete("status ", {"LUMBERJACK_STATE_DIR": str(fresh)}) == []
    assert not fresh.exists()


# ---- the man page, generated from the command line --------------------------------------


def test_manpage_covers_every_command_option_and_exit_code() -> None:
    from lumberjack.cli.manpage import render

    result = invoke("manpage")
    assert result.exit_code == 0 and result.stdout == render()
    assert json.loads(invoke("manpage", "--json").stdout) == {
        "ok": True, "format": "roff", "page": render(),
    }  # fmt: skip
    page = result.stdout
    assert page.startswith(".TH CONDOR_LUMBERJACK 1 ")
    for name in COMMAND_MODULES:
        if name not in ("sites", "lease"):  # groups: their subcommands are listed
            assert f'.SS "condor_lumberjack {name} ' in page, name
    assert '.SS "condor_lumberjack sites check ' in page
    assert '.SS "condor_lumberjack lease create ' in page
    assert "\\-constraint, \\-const" in page
    exit_status = page.split('.SH "EXIT STATUS"')[1]
    assert all(f"\\fB{code}\\fR" in exit_status for code in EXIT_CODES)
    assert not re.search(r"^[.'](?!TH|SH|SS|PP|TP|nf|fi|B |\\)", page, re.MULTILINE)
    if shutil.which("groff"):  # roff that groff reads without a warning
        checked = subprocess.run(["groff", "-man", "-ww", "-z"], input=page,
                                 capture_output=True, text=True)  # fmt: skip
        assert (checked.returncode, checked.stderr) == (0, "")


# ---- human output: text, never a Python repr ---------------------------------------------


def test_text_of_reads_as_text() -> None:
    assert text_of({"placed": True, "files": 3, "owners": ["alice", "bob"], "skip": None}) == (
        "placed yes, files 3, owners alice, bob, skip -"
    )
    assert text_of([]) == "none" and text_of(False) == "no"


def test_every_commands_human_output_has_no_repr(at_site, tmp_path: Path) -> None:
    _, site, _ = at_site
    outputs: dict[str, str] = {}

    def human(*args: str) -> None:
        result = invoke(*args)
        assert result.exit_code == 0, (args, result.output)
        outputs[" ".join(args)] = result.output

    human("unexport", "calib", "--dry-run")
    human("ship", "calib", "--dry-run")
    human("ship", "calib")
    human("launch", "calib", "--dry-run")
    human("launch", "calib")
    site.start()
    site.finish()
    human("status", "calib")
    human("status")
    human("status", "7.0")
    human("fetch", "calib", "--dry-run")
    human("fetch", "calib")
    human("cleanup", "calib", "--site", "--dry-run")
    human("exports")
    human("leases")
    human("sites", "list")
    human("sites", "show", "testbed")
    human("sites", "check", "testbed")
    human("sync", "--dry-run")
    assert "place: placed yes" in outputs["launch calib"]  # was {'placed': True, ...}
    for args, text in outputs.items():
        assert not PYTHON_REPR.search(text), f"condor_lumberjack {args} printed a repr:\n{text}"
