"""Schedd placement "allocation" on the testbed (profile testbed-alloc): the pilot's
first node runs the remote pool, nothing of lumberjack stays on the login node between
commands, a pilot killed mid-run leaves its queue in SPOOL and the next pilot resumes
it: every job runs to completion once, every output home byte-identical."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from journey import (
    SITE_BASE,
    alive_pilots,
    expected_outputs,
    history,
    lumberjack,
    make_job_dir,
    on_login_node,
    poll_status,
    site_path,
    site_run,
    submit,
    sync_one,
    tree,
)

from lumberjack.core import jobqueuelog as jql
from lumberjack.state.ledger import Ledger

pytestmark = pytest.mark.integration

SITE = "testbed-alloc"


def started_since(name: str, since: float) -> dict[str, int]:
    """Job id -> JobCurrentStartDate of the jobs in the site's job_queue.log that started
    (or finished) at or after the epoch `since`: a restarted schedd's reconnect attempt
    leaves a job "running" with its old start date, a real new run sets a new one."""
    ads = jql.read_log(site_path(f"{SITE_BASE}/{name}/spool/job_queue.log"))
    found = {}
    for key, ad in ads.items():
        if jql.key_kind(key) != "proc":
            continue
        start = int(float(ad.get("JobCurrentStartDate") or 0))
        if start >= int(since):
            found[key] = start
    return found


def running_in_log(name: str) -> set[str]:
    ads = jql.read_log(site_path(f"{SITE_BASE}/{name}/spool/job_queue.log"))
    return {k for k, ad in ads.items() if jql.key_kind(k) == "proc" and ad.get("JobStatus") == "2"}


def test_the_queue_lives_in_the_allocation_and_survives_a_killed_pilot(
    workspace: Path, state_dir: Path, at_site: list
) -> None:
    job_dir = make_job_dir(workspace)
    # 4 slots (2 nodes of 2 cores): 4 rounds of 10 s jobs, so that the kill finds jobs
    # running and others waiting, and the next pilot still has rounds to run.
    jobs = 16
    cluster = submit(job_dir, jobs, arguments="$(Process) 0 10")
    before = tree(job_dir)
    name = f"alloc-{uuid.uuid4().hex[:6]}"
    at_site.append(name)
    lumberjack("export", "--ids", str(cluster), "--site", SITE, "--name", name, "--nodes", "2",
               "--cores", "2", "--walltime", "20m", "--idle-shutdown", "30s")  # fmt: skip
    assert sync_one(name)["phase"] == "launched"
    assert on_login_node(name) == {}

    running = poll_status(name, lambda a: a["jobs"].get("running", 0) >= 2, "running two jobs")
    assert running["placement"] == "allocation"
    assert on_login_node(name) == {}
    (pilot,) = alive_pilots(running)
    site_run(f"scancel {pilot}")
    killed, killed_epoch = time.monotonic(), time.time()
    gone = poll_status(name, lambda a: not alive_pilots(a), "without a pilot", timeout=180, every=1)
    print(f"[allocation] Slurm reports the pilot gone {time.monotonic() - killed:.0f} s after "
          f"scancel: {gone['jobs']} ({gone['interrupted']} interrupted)")  # fmt: skip
    # The dead allocation's running jobs wait for the next pilot; none is lost.
    assert gone["interrupted"] >= 1 and "running" not in gone["jobs"]
    assert sum(gone["jobs"].values()) == jobs
    # The log is final now: the jobs it says run are the ones the kill cut off.
    cut_off = running_in_log(name)
    assert len(cut_off) == gone["interrupted"]
    assert on_login_node(name) == {}

    # The next pilot round: sync sees no pilot and jobs to run, and submits one.
    entry = sync_one(name)
    assert "launch" in entry["steps"], entry
    assert on_login_node(name) == {}
    # "running" in the log right after the new schedd starts could be a reconnect attempt
    # to the dead startd; a cut-off job runs again when it has a start date after the kill.
    deadline = time.monotonic() + 600
    first = None
    while (again := set(started_since(name, killed_epoch)) & cut_off) != cut_off:
        if again and first is None:
            first = time.monotonic() - killed
        assert time.monotonic() < deadline, f"{name}: of {cut_off} only {again} started again"
        time.sleep(1)
    first = first if first is not None else time.monotonic() - killed
    every = time.monotonic() - killed
    print(f"[allocation] pilot killed (scancel) -> first cut-off job running again: "
          f"{first:.0f} s; all {len(cut_off)} of them: {every:.0f} s")  # fmt: skip

    deadline = time.monotonic() + 900
    while (phase := Ledger().get(name).phase) != "imported":
        assert time.monotonic() < deadline, f"{name} still {phase}"
        sync_one(name)
        assert on_login_node(name) == {}
        time.sleep(3)

    after = tree(job_dir)
    expected = expected_outputs(job_dir, range(jobs))
    assert {path for path in after if path not in before} == set(expected)
    assert {path: after[path] for path in expected} == expected
    assert after["job.log"].count(b"Job terminated") == jobs
    ads = history(cluster, ["ProcId", "JobStatus", "ExitCode", "NumJobStarts"], expect=jobs)
    print(f"[allocation] starts per job: {[a.get('NumJobStarts') for a in ads]}")
    assert [(a["JobStatus"], a["ExitCode"]) for a in ads] == [(4, 0)] * jobs
    # Only a job the kill cut off can have started twice (one that had not begun
    # executing when the pilot died counts one start).
    starts = {f"{cluster}.{a['ProcId']}": a.get("NumJobStarts") for a in ads}
    assert {job for job, count in starts.items() if count != 1} <= cut_off, starts
    assert on_login_node(name) == {}
