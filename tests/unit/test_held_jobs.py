"""Held jobs at the site: which of them may still run there (core/jobstatus.py), what the
agent's status says about them, and `sync` bringing an export home once none of its jobs
can run again (against a fake site)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import load_fixture_module

from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw
from lumberjack.core.answers import Status
from lumberjack.core.contract import ExportLayout
from lumberjack.core.jobstatus import JobStatus, can_run_again, may_be_released
from lumberjack.site import job_queue
from lumberjack.site.pools import pool_for
from lumberjack.state import lifecycle

site_bundle = load_fixture_module("site_bundle")
NOW = 1_800_000_000.0
HOUR = 3600


@pytest.mark.parametrize(
    ("text", "releases"),
    [(None, False), ("", False), ("false", False), ("FALSE", False), ("(false)", False),
     (" ( False ) ", False), ("0", False), ("undefined", False),
     ("true", True), ("NumJobStarts < 2", True), ("(HoldReasonCode == 12)", True),
     ("false || true", True)],
)  # fmt: skip
def test_a_release_expression_counts_unless_literally_false(text, releases) -> None:
    assert may_be_released(text) is releases


def test_which_jobs_can_run_again() -> None:
    def live(status, **held) -> bool:
        return can_run_again(status, now=NOW, **held)

    for status in (JobStatus.IDLE, JobStatus.RUNNING, JobStatus.TRANSFERRING_OUTPUT,
                   JobStatus.SUSPENDED, None):  # fmt: skip
        assert live(status)
    assert not live(JobStatus.COMPLETED) and not live(JobStatus.REMOVED)
    assert not live(JobStatus.COMPLETED, periodic_release="true")
    # held: for good without a release expression, whenever it was held
    assert not live(JobStatus.HELD, held_since=NOW - 10, window_s=HOUR)
    assert not live(JobStatus.HELD, periodic_release="false", held_since=NOW, window_s=HOUR)
    # one the site may release is waited for within the pilots' walltime since its hold
    release = {"periodic_release": "NumJobStarts < 2", "window_s": HOUR}
    assert live(JobStatus.HELD, held_since=NOW - HOUR + 1, **release)
    assert not live(JobStatus.HELD, held_since=NOW - HOUR, **release)
    assert not live(JobStatus.HELD, held_since=0, **release)  # held when, nobody knows


@pytest.fixture
def layout(tmp_path: Path) -> ExportLayout:
    root = tmp_path / "calib"
    site_bundle.build(root)
    return ExportLayout(str(root))


def write_queue(layout: ExportLayout, statuses: tuple[str, ...], **held: str) -> None:
    """The site's queue with these statuses; `held`: attributes of every held proc."""
    ads = site_bundle.queue_ads(layout.spool, statuses=statuses)
    for ad in ads.values():
        if ad.get("JobStatus") == "5":
            for attr, value in held.items():
                ad.set(attr, value)
    Path(layout.spool).mkdir(parents=True, exist_ok=True)
    jqlw.write_log(Path(layout.spool, "job_queue.log"), ads)


def held_fields(answer: Status) -> tuple:
    return (answer.finished, answer.final, answer.held_final, answer.releasable,
            answer.wait_until)  # fmt: skip


def test_status_says_an_export_with_a_job_held_for_good_is_final(layout: ExportLayout) -> None:
    write_queue(layout, ("4", "5"), EnteredCurrentStatus=str(int(NOW)))
    answer = pool_for(layout, site_bundle.launch_plan()).status()
    assert answer.jobs == {"completed": 1, "held": 1}
    # "finished" keeps its meaning (every job completed or removed); "final" is new
    assert held_fields(answer) == (False, True, 1, 0, None)
    assert lifecycle.over_at_site(answer)
    write_queue(layout, ("2", "5"))  # one still runs: not over
    answer = pool_for(layout, site_bundle.launch_plan()).status()
    assert held_fields(answer) == (False, False, 1, 0, None)
    assert not lifecycle.over_at_site(answer)


def test_status_waits_for_a_job_the_site_may_release(layout: ExportLayout) -> None:
    plan = site_bundle.launch_plan()
    held_at = int(NOW)
    allocation = site_bundle.launch_plan(placement="allocation")
    for pool in (pool_for(layout, plan), pool_for(layout, allocation)):
        write_queue(layout, ("4", "5"), EnteredCurrentStatus=str(held_at),
                    PeriodicRelease="NumJobStarts < 2")  # fmt: skip
        answers = [
            job_queue.held_report(job_queue.queue_ads(layout), plan.spec.walltime_s, now)
            for now in (NOW, NOW + plan.spec.walltime_s)
        ]
        assert answers[0] == {"final": False, "held_final": 0, "releasable": 1,
                              "wait_until": held_at + plan.spec.walltime_s}  # fmt: skip
        # the walltime over: it comes home held, as it is
        assert answers[1] == {"final": True, "held_final": 1, "releasable": 0, "wait_until": None}
        answer = pool.status()  # now: within the walltime
        assert (answer.final, answer.releasable) == (False, 1)


def test_a_cluster_ads_release_expression_counts_for_its_procs(layout: ExportLayout) -> None:
    ads = site_bundle.queue_ads(layout.spool, statuses=("5", "5"))
    for key, ad in ads.items():
        if jql.key_kind(key) == "cluster":
            ad.set("PeriodicRelease", "true")
        elif key == f"{site_bundle.CLUSTER}.1":
            ad.set("PeriodicRelease", "false")  # a proc's own wins
        ad.set("EnteredCurrentStatus", str(int(NOW)))
    assert job_queue.held_report(ads, HOUR, NOW) == {
        "final": False, "held_final": 1, "releasable": 1, "wait_until": int(NOW) + HOUR,
    }  # fmt: skip
    assert job_queue.held_report({}, HOUR, NOW)["final"] is False  # no job: nothing over


def test_a_job_held_from_home_is_waited_for_as_a_releasable_one(layout: ExportLayout) -> None:
    # condor_hold forwarded from the access point (HoldReasonCode 1): a condor_release
    # from there may still come; a hold of the site's own (code 3) ends the job there.
    ads = site_bundle.queue_ads(layout.spool, statuses=("5", "5"))
    for key, code in ((f"{site_bundle.CLUSTER}.0", "1"), (f"{site_bundle.CLUSTER}.1", "3")):
        ads[key].set("HoldReasonCode", code)
        ads[key].set("EnteredCurrentStatus", str(int(NOW)))
    assert job_queue.held_report(ads, HOUR, NOW) == {
        "final": False, "held_final": 1, "releasable": 1, "wait_until": int(NOW) + HOUR,
    }  # fmt: skip
    assert job_queue.held_report(ads, HOUR, NOW + HOUR)["final"] is True


def test_status_text_says_what_the_held_jobs_mean() -> None:
    from lumberjack.cli.status_cmd import _held_line

    none = Status({"completed": 2}, 2, True, True, 0, 0, None, False, True, {})
    assert _held_line(none) == ""
    assert _held_line(replace(none, held_final=1)) == "  held:   1 for good\n"
    assert _held_line(replace(none, held_final=1, releasable=2, wait_until=3600)) == (
        "  held:   1 for good, 2 the site may release (waited for until 01:00 UTC)\n"
    )
