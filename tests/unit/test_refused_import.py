"""An import that refuses what came back (a job injected at the site, a queue the site
broke), or a fetch that fails, must not wedge an export: from fetched, `cleanup --site`
removes the site's directory with the pool's keys while the bundle stays; from launched
on, `unexport --discard` stops the remote pool and hands the jobs back as they left, and
`cleanup` then removes the rest. The local bundle never goes while the local schedd
still counts the jobs as exported. Against the fake site."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import lumberjack.cli.exports_cmd  # noqa: F401  (registers the commands on `cli`)
import lumberjack.cli.steps_cmd  # noqa: F401
from lumberjack.cli import cli
from lumberjack.core import jobqueuelog as jql
from lumberjack.errors import BadInput, LumberjackError
from lumberjack.profiles.request import build_request
from lumberjack.profiles.sites import find_profile
from lumberjack.state import handback, lifecycle, phases, plans
from lumberjack.state.ledger import Ledger


def load_fixture(name: str):  # -> module
    from conftest import load_fixture_module

    return load_fixture_module(name)


fake = load_fixture("fake_site")
site_bundle = load_fixture("site_bundle")
ROOT = "/home/hpcuser/lj/calib"


def injected(remote_spool: str, statuses: tuple[str, ...] = ("1", "1")) -> dict[str, jql.Ad]:
    """The site's queue as it left, plus a cluster nobody exported (injected there)."""
    ads = site_bundle.queue_ads(remote_spool, statuses)
    for key in (jql.cluster_key(99), jql.proc_key(99, 0)):
        attrs = {"ClusterId": "99", "ProcId": "0", "Cmd": '"/bin/evil"', "JobStatus": "4"}
        ads[key] = jql.Ad(key, "(empty)", "(empty)", attrs)
    return ads


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "state")


def launched(ledger: Ledger, tmp_path: Path, queue=site_bundle.queue_ads):  # -> (site, schedd)
    bundle = site_bundle.build(tmp_path / "calib")
    ledger.create(
        "calib", site="testbed", bundle_dir=bundle, remote_spool=f"{ROOT}/spool",
        owner=site_bundle.BUNDLE_OWNER, clusters=[site_bundle.CLUSTER], jobs=["7.0", "7.1"],
        info={"remote_dir": ROOT, "request": plans.request_info(
            build_request(find_profile("testbed"), nodes=3, cores=2, walltime="30m"))},
    )  # fmt: skip
    ledger.move("calib", "export")
    ledger.move("calib", "export")
    remote_spool = json.loads((bundle / "manifest.json").read_text())["remote_spool"]
    site = fake.FakeSite(queue, remote_spool)
    schedd = fake.FakeSchedd()
    lifecycle.ship(ledger, site, ledger.get("calib"))
    lifecycle.launch(ledger, site, ledger.get("calib"))
    return site, schedd


def fetched(ledger: Ledger, tmp_path: Path, queue=site_bundle.queue_ads):  # -> (site, schedd)
    site, schedd = launched(ledger, tmp_path, queue)
    site.finish()
    lifecycle.fetch(ledger, site, ledger.get("calib"))
    assert ledger.get("calib").phase == "fetched"
    return site, schedd


def site_files(site) -> list[str]:
    return sorted(p for p in site.connection.files if p.startswith(ROOT + "/"))


def test_a_broken_queue_from_the_site_can_still_be_cleaned_up_and_handed_back(
    ledger: Ledger, tmp_path: Path
) -> None:
    site, schedd = fetched(ledger, tmp_path)
    record = ledger.get("calib")
    (lifecycle.returned_dir(ledger, record) / "job_queue.log").write_text("garbage\n")
    with pytest.raises(LumberjackError):
        lifecycle.import_results(ledger, schedd, record)
    assert ledger.get("calib").phase == "fetched" and schedd.merged == []

    # Plain cleanup would remove the bundle while the jobs are still exported: refused.
    with pytest.raises(BadInput, match="is fetched; cleanup needs phase"):
        handback.cleanup(ledger, site, ledger.get("calib"))
    assert site_files(site) and record.bundle_dir.exists()

    removed = handback.cleanup(ledger, site, ledger.get("calib"), site_only=True)
    assert removed["remote"] == {"removed": True} and "local_removed" not in removed
    assert site_files(site) == [] and not site.pool_running
    assert record.bundle_dir.exists() and ledger.get("calib").phase == "fetched"

    assert handback.discard_and_hand_back(ledger, schedd, ledger.get("calib")) == {"jobs": 1}
    assert schedd.unexported == [[site_bundle.CLUSTER]] and schedd.merged == []
    assert ledger.get("calib").phase == "unexported"
    final = handback.cleanup(ledger, site, ledger.get("calib"))
    assert final["local_removed"] == str(record.bundle_dir) and not record.bundle_dir.exists()
    assert ledger.get("calib").phase == "cleaned"
    steps = [s["step"] for s in ledger.steps("calib") if s["step"].startswith("phase:")]
    assert steps[-3:] == ["phase:fetched", "phase:unexported", "phase:cleaned"]


def test_a_job_injected_at_the_site_never_wedges_the_export(ledger: Ledger, tmp_path: Path) -> None:
    """Whatever import makes of the injected job (take what was sent, or refuse), the
    jobs come home exactly once and the site's directory goes."""
    site, schedd = fetched(ledger, tmp_path, queue=injected)
    try:
        lifecycle.import_results(ledger, schedd, ledger.get("calib"))
    except LumberjackError:
        pass
    if ledger.get("calib").phase == "fetched":
        handback.cleanup(ledger, site, ledger.get("calib"), site_only=True)
        handback.discard_and_hand_back(ledger, schedd, ledger.get("calib"))
    handback.cleanup(ledger, site, ledger.get("calib"))
    assert ledger.get("calib").phase == "cleaned" and site_files(site) == []
    assert len(schedd.merged) + len(schedd.unexported) == 1
    for merged in schedd.merged:
        assert {jql.parse_key(k).cluster for k in merged if jql.key_kind(k) == "proc"} == {7}


def running(ledger: Ledger, tmp_path: Path):  # -> (site, schedd), the jobs running there
    site, schedd = launched(ledger, tmp_path)
    site.start()
    lifecycle.refresh_status(ledger, site, ledger.get("calib"))
    assert ledger.get("calib").phase == "running" and site.pool_running
    return site, schedd


def test_jobs_the_site_runs_go_back_only_after_its_pool_stopped(
    ledger: Ledger, tmp_path: Path
) -> None:
    """A fetch that failed or was refused leaves the export running (or finished): the
    jobs still come home unrun, the remote pool stopped first, then everything goes."""
    site, schedd = running(ledger, tmp_path)
    assert phases.ends("unexport", "running") == ()  # what the site did is not dropped quietly
    assert phases.ends("cleanup", "running") == ()  # the bundle stays while the jobs are out

    stops: list[bool] = []
    unexport = schedd.unexport
    schedd.unexport = lambda clusters: (stops.append(site.pool_running), unexport(clusters))[1]
    answer = handback.discard_and_hand_back(ledger, schedd, ledger.get("calib"), site)
    assert stops == [False]  # the pool was down before the local schedd got the jobs
    assert answer["jobs"] == 1 and answer["stop"]["cancelled_pilots"] == ["1000"]
    assert schedd.unexported == [[site_bundle.CLUSTER]] and schedd.merged == []
    assert ledger.get("calib").phase == "unexported"
    final = handback.cleanup(ledger, site, ledger.get("calib"))
    assert final["remote"] == {"removed": True} and site_files(site) == []
    bundle = ledger.get("calib").bundle_dir
    assert not bundle.exists() and ledger.get("calib").phase == "cleaned"


@pytest.mark.parametrize("phase", ["launched", "running", "finished"])
def test_an_unreachable_site_keeps_the_jobs_unless_forced(
    ledger: Ledger, tmp_path: Path, phase: str
) -> None:
    site, schedd = running(ledger, tmp_path)
    ledger.set_phase("calib", phase)
    site.reachable = False
    with pytest.raises(LumberjackError, match="cannot stop its remote pool .* add --force"):
        handback.discard_and_hand_back(ledger, schedd, ledger.get("calib"), site)
    assert schedd.unexported == [] and ledger.get("calib").phase == phase  # nothing changed

    forced = handback.discard_and_hand_back(ledger, schedd, ledger.get("calib"), site, force=True)
    assert "may still run there" in forced["left"] and ledger.get("calib").phase == "unexported"
    with pytest.raises(LumberjackError, match="cannot remove .* add --force"):
        handback.cleanup(ledger, site, ledger.get("calib"))
    assert ledger.get("calib").bundle_dir.exists() and ledger.get("calib").phase == "unexported"
    left = handback.cleanup(ledger, site, ledger.get("calib"), force=True)
    assert left["left"].startswith(f"{ROOT} at site testbed") and "local_removed" in left
    assert ledger.get("calib").info["left_at_site"] == left["left"]
    site.reachable = True  # cleanup again, from cleaned: the site directory goes now
    assert handback.cleanup(ledger, site, ledger.get("calib"))["remote"] == {"removed": True}
    assert site_files(site) == [] and ledger.get("calib").info["left_at_site"] is None


def test_the_command_line_offers_the_escapes_from_fetched(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger.create("calib", site="testbed", bundle_dir=tmp_path / "b", remote_spool="/s",
                  owner=site_bundle.BUNDLE_OWNER, clusters=[7], jobs=["7.0"])  # fmt: skip
    ledger.set_phase("calib", "fetched")
    monkeypatch.setenv("LUMBERJACK_STATE_DIR", str(ledger.directory))
    refused = CliRunner().invoke(cli, ["unexport", "calib"])
    assert refused.exit_code == 2
    assert "`condor_lumberjack unexport --discard calib` hands them back" in refused.stderr
    help_text = " ".join(CliRunner().invoke(cli, ["unexport", "--help"]).stdout.split())
    assert "From phase launched, running, finished or fetched" in help_text
    dry = CliRunner().invoke(cli, ["unexport", "--discard", "--dry-run", "calib"])
    assert dry.exit_code == 0 and "would hand back clusters 7\n" == dry.stdout
    site_dry = CliRunner().invoke(cli, ["cleanup", "--site", "--dry-run", "calib"])
    assert site_dry.exit_code == 0 and "would cleanup --site 'calib'" in site_dry.stdout
    ledger.set_phase("calib", "shipped")
    too_early = CliRunner().invoke(cli, ["unexport", "--discard", "calib"])
    assert too_early.exit_code == 2
    assert "unexport --discard needs phase launched, running, finished or fetched" in (
        too_early.stderr
    )
    assert ledger.get("calib").phase == "shipped"
    alone = CliRunner().invoke(cli, ["unexport", "--force", "calib"])
    assert alone.exit_code == 2 and "--force goes with --discard" in alone.stderr
