"""The command line without daemons: help texts from the phase table, advice, counted
words, the prototype's spellings, and messages that say what happened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import lumberjack.cli.exports_cmd as exports_cmd
import lumberjack.cli.import_cmd as import_cmd
import lumberjack.cli.steps_cmd  # noqa: F401  (registers the commands on `cli`)
from lumberjack.ap import export as export_mod
from lumberjack.cli import cli
from lumberjack.cli.common import plural
from lumberjack.core import jobqueuelog_write as jqlw
from lumberjack.state import lifecycle, phases
from lumberjack.state.ledger import Ledger


def load_fixture(name: str):  # -> module
    from conftest import load_fixture_module

    return load_fixture_module(name)


fake = load_fixture("fake_site")
site_bundle = load_fixture("site_bundle")


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setenv("LUMBERJACK_STATE_DIR", str(tmp_path / "state"))
    return Ledger()


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def add_export(ledger: Ledger, phase: str, bundle: Path = Path("/nonexistent"), site="testbed"):
    ledger.create("calib", site=site, bundle_dir=bundle, remote_spool="/s",
                  owner=site_bundle.BUNDLE_OWNER, clusters=[7], jobs=["7.0", "7.1"],
                  info={"remote_dir": "/site/calib"})  # fmt: skip
    ledger.set_phase("calib", phase)


def test_plural() -> None:
    assert [plural(n, "cluster") for n in (0, 1, 2)] == ["0 clusters", "1 cluster", "2 clusters"]
    plan = export_mod.Plan("calib", "alice", [7], ["7.0"], Path("/b"), "/s", 1, 1)
    assert exports_cmd._plan_text(plan, dry=True).startswith(
        "would export 1 job in 1 cluster of alice as 'calib'"
    )
    assert "1 file, 1 byte" in exports_cmd._plan_text(plan, dry=True)


def test_help_texts_name_the_phases_of_the_table() -> None:
    unexport = invoke("unexport", "--help").stdout
    allowed = phases.starts("unexport")
    assert len(allowed) == 5
    assert all(p.value in " ".join(unexport.split()) for p in allowed)
    assert "exported, shipped or failed" in " ".join(unexport.split())
    cleanup = " ".join(invoke("cleanup", "--help").stdout.split())
    assert "phase imported, cleaned, failed or unexported" in cleanup


def test_run_help_shows_its_defaults() -> None:
    text = invoke("run", "--help").stdout
    assert "[default: 30s]" in text  # --poll
    assert "[default: wait]" in text


@pytest.mark.parametrize(
    ("phase", "advice"),
    [
        ("launched", "bring its jobs home with `condor_lumberjack fetch calib` then "
                     "`condor_lumberjack import calib` (jobs that did not finish come back idle)"),
        ("running", "`condor_lumberjack fetch calib` then `condor_lumberjack import calib`"),
        ("finished", "`condor_lumberjack fetch calib` then `condor_lumberjack import calib`"),
        ("fetched", "bring its jobs home with `condor_lumberjack import calib`"),
        ("imported", "its jobs are back in the local schedd already"),
        ("cleaned", "there is nothing left to hand back"),
        ("unexported", "there is nothing left to hand back"),
    ],
)  # fmt: skip
def test_unexport_advice_follows_the_phase(ledger: Ledger, phase: str, advice: str) -> None:
    add_export(ledger, phase)
    result = CliRunner().invoke(cli, ["unexport", "calib"])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: export 'calib' is {phase}; unexport needs phase ")
    assert advice in result.stderr
    assert "fetch and import it instead" not in result.stderr
    assert ledger.get("calib").phase == phase


def test_exports_says_where_the_ledger_is(ledger: Ledger) -> None:
    result = invoke("exports")
    assert (
        result.stdout
        == f"no exports in {ledger.path} (another ledger: set $LUMBERJACK_STATE_DIR)\n"
    )
    assert json.loads(invoke("exports", "--json").stdout)["ledger"] == str(ledger.path)


def test_a_second_import_says_nothing_new_was_done(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = site_bundle.build(tmp_path / "calib")
    remote_spool = json.loads((bundle / "manifest.json").read_text())["remote_spool"]
    add_export(ledger, "fetched", bundle)
    returned = lifecycle.returned_dir(ledger, ledger.get("calib"))
    jqlw.write_log(returned / "job_queue.log", site_bundle.queue_ads(remote_spool, ("4", "2")))
    schedd = fake.FakeSchedd()
    monkeypatch.setattr(import_cmd, "LocalSchedd", lambda: schedd)
    first = invoke("import", "calib")
    assert first.stdout == (
        "imported 2 jobs of 'calib': 1 completed, 1 handed back idle; 0 output files placed\n"
    )
    assert schedd.woken == ["7.1"]  # the job handed back idle wakes the schedd (schedd._wake)
    second = invoke("import", "calib")
    assert (
        second.stdout
        == "nothing new: 'calib' was imported already (2 jobs, 0 output files in place)\n"
    )
    assert json.loads(invoke("import", "calib", "--json").stdout)["already_imported"] is True
    assert ledger.get("calib").phase == "imported"


def test_the_prototype_spellings_reach_the_commands(ledger: Ledger, tmp_path: Path) -> None:
    add_export(ledger, "exported")
    # every flag parsed: the refusal is the export's own (the name is taken), not usage
    result = CliRunner().invoke(cli, [
        "--export", "-jobconstraint", 'JobBatchName == "calib"', "-out", str(tmp_path / "out"),
        "-remotespool", "/hpc/spool", "--name", "calib",
    ])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.stderr == "error: an export named 'calib' already exists; choose another --name\n"
    bundle = site_bundle.build(tmp_path / "offline")
    result = invoke("--import", "-in", str(bundle), "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("would import 2 jobs of 'offline': 0 completed, 2 handed back")
    usage = CliRunner().invoke(cli, ["--exprot"])
    assert usage.exit_code == 2 and "No such option" in usage.stderr


class QueueGone:
    """A local schedd whose queue no longer holds the jobs; its history does."""

    def __init__(self, history: list[dict]) -> None:
        self._history = history

    def query(self, constraint: str, projection=None) -> list[dict]:
        return []

    def history(self, constraint: str, projection=None, limit: int = 10) -> list[dict]:
        return self._history[:limit]


def test_exporting_jobs_that_left_the_queue_names_their_state() -> None:
    done = [{"ClusterId": 12, "ProcId": p, "JobStatus": 4} for p in range(2)]
    with pytest.raises(export_mod.BadInput) as caught:
        export_mod.select_jobs(QueueGone(done), export_mod.Selection(ids=("12",)))
    assert str(caught.value) == (
        "no job in the queue matches ids 12: 12.0, 12.1 left it (completed) and cannot be "
        "exported; only idle jobs can"
    )
    with pytest.raises(export_mod.BadInput, match="^no jobs match ids 13$"):
        export_mod.select_jobs(QueueGone([]), export_mod.Selection(ids=("13",)))
