"""Jobs held at the site come home through `sync` alone, as cron runs it: a job held for
good does not keep its export away, a job the site may still release is waited for, and
no pilot is left behind."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from journey import (
    history,
    lumberjack,
    make_job_dir,
    query,
    site_run,
    submit,
    sync_until_imported,
)

pytestmark = pytest.mark.integration

HOLD_REASON = "exit code 4 at the site"


def test_sync_brings_held_jobs_home(workspace: Path, state_dir: Path, at_site: list) -> None:
    held_dir, again_dir = make_job_dir(workspace, "held"), make_job_dir(workspace, "again")
    # Three jobs; the second exits 4, which its on_exit_hold holds for good (no
    # periodic_release: nothing at the site would release it).
    cluster = submit(held_dir, 3, exit_codes={1: 4}, on_exit_hold="ExitCode == 4",
                     on_exit_hold_reason=f'"{HOLD_REASON}"', on_exit_hold_subcode="7")  # fmt: skip
    # One job held at its first exit that the site releases: it runs again and completes
    # there, so the export must wait for it.
    again = submit(again_dir, 1, on_exit_hold="NumJobStarts < 2",
                   periodic_release="NumJobStarts < 2")  # fmt: skip
    name = f"held-{cluster}"
    lumberjack("export", "--ids", str(cluster), str(again), "--site", "testbed",
               "--nodes", "1", "--walltime", "15m", "--name", name)  # fmt: skip
    at_site.append(name)

    sync_until_imported(name)

    attrs = ["JobStatus", "HoldReason", "HoldReasonCode", "HoldReasonSubCode", "Managed"]
    held = query(f"ClusterId == {cluster} && ProcId == 1", attrs)
    assert len(held) == 1 and held[0]["JobStatus"] == 5 and "Managed" not in held[0], held
    assert held[0]["HoldReason"] == f"at site testbed: {HOLD_REASON}"
    assert (held[0]["HoldReasonCode"], held[0]["HoldReasonSubCode"]) == (3, 7)
    log = (held_dir / "job.log").read_text()
    assert f"012 ({cluster:03d}.001.000)" in log and f"005 ({cluster:03d}.001.000)" not in log
    logs = lumberjack("logs", name, "--job", f"{cluster}.1").stdout
    assert logs.startswith(f"job {cluster}.1: held at the site (HoldReasonCode 3): {HOLD_REASON}")

    done = history(cluster, ["ProcId", "ExitCode"], expect=2)
    assert [(a["ProcId"], a["ExitCode"]) for a in done] == [(0, 0), (2, 0)]
    for proc in (0, 2):
        assert (held_dir / f"out.{proc}").read_text() == f"stdout of job {proc}\n"
        assert (held_dir / "results" / f"renamed-{proc}.txt").read_text() == f"renamed {proc}\n"

    # Released at the site, run again and completed there before the export came home.
    (released,) = history(again, ["ProcId", "JobStatus", "NumJobStarts"], expect=1)
    assert released["JobStatus"] == 4 and released["NumJobStarts"] >= 2, released
    again_log = (again_dir / "job.log").read_text()
    for code in ("012", "013", "005"):
        assert f"{code} ({again:03d}.000.000)" in again_log, again_log
    assert (again_dir / "out.0").read_text() == "stdout of job 0\n"

    # The pilot was cancelled when the export came home: Slurm may still list it as
    # COMPLETING for a few seconds while its node cleans up, never as running.
    deadline = time.monotonic() + 60
    while True:
        pilots = site_run("squeue -h -u hpcuser -o '%i %j %T'")
        left = [line for line in pilots.splitlines() if f" lj-{name}-" in line]
        assert not [line for line in left if not line.endswith("COMPLETING")], left
        if not left or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert left == [], left
