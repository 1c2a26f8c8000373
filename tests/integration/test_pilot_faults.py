"""Pilots that end early, on the testbed's Slurm: a pilot killed while its jobs run
(the jobs come back and run once more, elsewhere, once), a pilot retired with USR1 before
its walltime (no job is cut off), and an idle pilot (it ends itself)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from journey import (
    alive_pilots,
    expected_outputs,
    history,
    lumberjack,
    make_job_dir,
    poll_status,
    site_run,
    submit,
    sync_one,
    tree,
)

from lumberjack.state.ledger import Ledger

pytestmark = pytest.mark.integration


def sync_home(name: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while (phase := Ledger().get(name).phase) != "imported":
        assert time.monotonic() < deadline, f"{name} still {phase}"
        sync_one(name)
        time.sleep(3)


def check_outputs_once(job_dir: Path, before: dict, procs: int) -> None:
    after = tree(job_dir)
    expected = expected_outputs(job_dir, range(procs))
    assert {path for path in after if path not in before} == set(expected)
    assert {path: after[path] for path in expected} == expected
    terminated = after["job.log"].count(b"Job terminated")
    assert terminated == procs, after["job.log"].decode(errors="replace")


def test_a_killed_pilots_jobs_come_back_and_run_once(
    workspace: Path, state_dir: Path, at_site: list
) -> None:
    job_dir = make_job_dir(workspace)
    jobs = 3
    cluster = submit(job_dir, jobs, arguments="$(Process) 0 40")
    before = tree(job_dir)
    name = f"killed-{uuid.uuid4().hex[:6]}"
    at_site.append(name)
    # Four slots (two nodes of two cores) for three jobs: every job runs when the pilot
    # dies, and their second run is one round of 40 s, not two.
    lumberjack("export", "--ids", str(cluster), "--site", "testbed", "--name", name,
               "--nodes", "2", "--cores", "2", "--walltime", "20m")  # fmt: skip
    assert sync_one(name)["phase"] == "launched"

    running = poll_status(name, lambda a: a["jobs"].get("running", 0) == jobs, "running all jobs")
    pilots = alive_pilots(running)
    assert len(pilots) == 1
    # The site's schedd shows a job running once its claim is activated; the shadow
    # counts the start (NumJobStarts) only when the starter reports the job executing. A
    # kill in between leaves no start to see (a CI run met it: starts [1, 1, 1]). The
    # jobs run 40 s: 10 s in, each has started and is still running.
    time.sleep(10)
    site_run(f"scancel {pilots[0]}")
    killed = time.monotonic()
    gone = poll_status(name, lambda a: not alive_pilots(a), "without a pilot", timeout=120, every=1)
    print(f"[killed pilot] Slurm reports the pilot gone after {time.monotonic() - killed:.0f} s")
    assert gone["jobs"].get("completed", 0) == 0  # the kill came while they ran

    back = poll_status(name, lambda a: not a["jobs"].get("running"), "back to idle", timeout=600)
    took = time.monotonic() - killed
    print(f"[killed pilot] jobs back to idle {took:.0f} s after scancel: {back['jobs']}")
    assert back["jobs"] == {"idle": jobs}, back["jobs"]

    sync_home(name)  # new pilots, the jobs run again, fetch, import
    check_outputs_once(job_dir, before, jobs)
    ads = history(cluster, ["ProcId", "JobStatus", "ExitCode", "NumJobStarts"], expect=jobs)
    print(f"[killed pilot] starts per job: {[a.get('NumJobStarts') for a in ads]}")
    assert [(a["JobStatus"], a["ExitCode"]) for a in ads] == [(4, 0)] * jobs
    # The jobs cut off by the kill started again (the attempt is visible), none more than
    # twice. A job killed in its first seconds may leave no start counted at the site.
    starts = sorted(a.get("NumJobStarts", 0) for a in ads)
    assert starts[-1] == 2 and all(1 <= s <= 2 for s in starts), starts


def test_usr1_retires_without_cutting_off_a_job(
    workspace: Path, state_dir: Path, at_site: list
) -> None:
    """One node of one core, two jobs of 30 s: USR1 while the first runs lets it finish
    and starts nothing more; the pilot ends."""
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 2, arguments="$(Process) 0 30")
    name = f"retire-{uuid.uuid4().hex[:6]}"
    at_site.append(name)
    lumberjack("export", "--ids", str(cluster), "--site", "testbed", "--name", name,
               "--nodes", "1", "--cores", "1", "--walltime", "20m")  # fmt: skip
    assert sync_one(name)["phase"] == "launched"

    first = poll_status(name, lambda a: a["jobs"].get("running") == 1, "running a job")
    (pilot,) = alive_pilots(first)
    site_run(f"scancel --signal=USR1 --batch {pilot}")
    retired = time.monotonic()
    ended = poll_status(
        name, lambda a: pilot not in alive_pilots(a), "without its pilot", timeout=180
    )
    print(f"[retire] pilot ended {time.monotonic() - retired:.0f} s after USR1: {ended}")
    # The schedd may try the next job on the retired slot's claim: that shadow finds no
    # startd and the job goes back to idle without having run.
    settled = poll_status(name, lambda a: "running" not in a["jobs"], "settled", timeout=300)
    assert settled["jobs"] == {"completed": 1, "idle": 1}  # finished; nothing new started
    assert first["jobs"] == {"running": 1, "idle": 1}
    assert ended["pilots"][pilot] == "done"


def test_an_idle_pilot_ends_itself(workspace: Path, state_dir: Path, at_site: list) -> None:
    """Its job done, the pilot's startd has no work for --idle-shutdown and exits, and
    the pilot ends before anyone fetches."""
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 1)
    before = tree(job_dir)
    name = f"idle-{uuid.uuid4().hex[:6]}"
    at_site.append(name)
    lumberjack("export", "--ids", str(cluster), "--site", "testbed", "--name", name,
               "--nodes", "1", "--walltime", "20m", "--idle-shutdown", "30s")  # fmt: skip
    assert sync_one(name)["phase"] == "launched"
    done = poll_status(name, lambda a: a["finished"], "finished", timeout=300)
    (pilot,) = done["pilots"]
    finished = time.monotonic()
    ended = poll_status(name, lambda a: not alive_pilots(a), "without a live pilot", timeout=240)
    print(f"[idle] the idle pilot ended itself {time.monotonic() - finished:.0f} s after "
          f"the job (idle shutdown 30 s)")  # fmt: skip
    assert ended["pilots"][pilot] == "done"

    sync_home(name)
    check_outputs_once(job_dir, before, 1)
    ads = history(cluster, ["ProcId", "JobStatus", "NumJobStarts"], expect=1)
    assert [(a["JobStatus"], a.get("NumJobStarts")) for a in ads] == [(4, 1)]
