"""The crash matrix: one export walks through every crash point in crashpoints.POINTS.

At each point the process (or, for the agent's points, the site agent) dies with
SIGKILL; the next command (`sync`, or the step again) goes on from whatever that left,
and the walk goes on to the next point. At the end every job ran once and is home once:
outputs byte for byte, each event once in the user log, one start per job, the ledger
and the site clean. The export points end in a rollback (the bundle never left this
machine), so they are walked by exports of their own first.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from journey import (
    SITE_BASE,
    expected_outputs,
    history,
    make_job_dir,
    query,
    site_path,
    stop_at_site,
    submit,
    tree,
)

from lumberjack.core.crashpoints import ENV, POINTS
from lumberjack.state.ledger import Ledger

pytestmark = pytest.mark.integration

#: Points reached inside the site agent: the command at the access point goes on and
#: reports the agent's failure (as when the SSH link drops mid-command).
AGENT_POINTS = {p for p, what in POINTS.items() if what.startswith("(agent)")}
EXPORT_POINTS = [p for p in POINTS if p.startswith("export.")]
# The lease points are walked by test_site_leases, the joined ones by test_alloc_lease.
SITE_POINTS = [p for p in POINTS if not p.startswith(("export.", "lease.", "joined."))]


def run(*args: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(ENV, None)
    if crash:
        env[ENV] = crash
    return subprocess.run(
        [sys.executable, "-m", "lumberjack", *args], capture_output=True, text=True, env=env
    )


def crashed(result: subprocess.CompletedProcess[str], point: str) -> bool:
    """Whether the command (or the agent it ran) died at `point`."""
    said = f"crash point {point} reached"
    if result.returncode == -9:
        assert said in result.stderr, result.stderr
        return True
    return said in result.stdout  # the agent died: its last words are in the error


def test_a_crash_in_export_is_rolled_back_by_sync(workspace: Path, state_dir: Path, site) -> None:
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 2)
    for point in EXPORT_POINTS:
        name = f"x-{point.split('.')[1]}"
        result = run("export", "--ids", str(cluster), "--site", "testbed", "--name", name,
                     crash=point)  # fmt: skip
        assert result.returncode == -9 and crashed(result, point), (point, result.stderr)
        assert Ledger().get(name).phase == "exporting"

        synced = json.loads(run("sync", "--json").stdout)["exports"]
        (entry,) = [e for e in synced if e["name"] == name]
        assert entry["phase"] == "failed" and entry["steps"][0].startswith("recovered"), entry
        ads = query(f"ClusterId == {cluster}", ["JobStatus", "Managed"])
        assert [(a["JobStatus"], a.get("Managed")) for a in ads] in (
            [(1, None)] * 2,
            [(1, "ReturnedToSchedd")] * 2,
        ), (point, ads)
        assert not (state_dir / "bundles" / name).exists()
        print(f"[crash] {point}: sync rolled back; the jobs are the local schedd's, idle")


def test_a_crash_anywhere_at_the_site_is_finished_by_rerunning(
    workspace: Path, state_dir: Path, site
) -> None:
    jobs = 2
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, jobs)
    before = tree(job_dir)
    name = "crashwalk"
    remote_dir = f"{SITE_BASE}/{name}"
    result = run("export", "--ids", str(cluster), "--site", "testbed", "--name", name,
                 "--nodes", "1", "--cores", "2", "--walltime", "15m")  # fmt: skip
    assert result.returncode == 0, result.stderr
    try:
        for point in SITE_POINTS:
            if point.startswith("cleanup."):
                _sync_until(name, "imported")
                command = ("cleanup", name, "--json")
            else:
                command = ("sync", "--name", name, "--json")
            deadline = time.monotonic() + 300
            while True:
                result = run(*command, crash=point)
                if crashed(result, point):
                    break
                assert result.returncode == 0, (point, result.stdout, result.stderr)
                assert time.monotonic() < deadline, f"{point} never reached: {result.stdout}"
                time.sleep(2)
            phase = Ledger().get(name).phase
            who = "the agent" if point in AGENT_POINTS else "lumberjack"
            print(f"[crash] {point}: {who} killed; phase {phase}; the next command goes on")
        final = run("cleanup", name, "--json")
        assert final.returncode == 0, final.stderr
        assert json.loads(final.stdout)["phase"] == "cleaned"
    finally:
        stop_at_site(name, remote_dir)  # whatever a failure left running
    assert not site_path(remote_dir).exists()
    assert not (state_dir / "bundles" / name).exists()

    after = tree(job_dir)
    expected = expected_outputs(job_dir, range(jobs))
    assert {path for path in after if path not in before} == set(expected)
    assert {path: after[path] for path in expected} == expected
    # Each event once: the site's part of the user log holds no block twice, and each job
    # started once and terminated once.
    appended = after["job.log"][len(before["job.log"]) :].decode()
    assert after["job.log"].startswith(before["job.log"])
    blocks = [b.strip() for b in appended.split("...") if b.strip()]
    assert [b for b, n in Counter(blocks).items() if n > 1] == []
    for proc in range(jobs):
        job = f"({cluster:03d}.{proc:03d}.000)"
        for code in ("001", "005"):
            assert len(re.findall(rf"^{code} {re.escape(job)}", appended, re.M)) == 1, (
                proc,
                code,
                appended,
            )
    ads = history(cluster, ["ProcId", "JobStatus", "ExitCode", "NumJobStarts"], expect=jobs)
    assert [(a["JobStatus"], a["ExitCode"], a.get("NumJobStarts")) for a in ads] == [
        (4, 0, 1)
    ] * jobs
    assert query(f"ClusterId == {cluster}", ["ProcId"]) == []


def _sync_until(name: str, phase: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while Ledger().get(name).phase != phase:
        assert time.monotonic() < deadline, f"{name} still {Ledger().get(name).phase}"
        result = run("sync", "--name", name, "--json")
        assert result.returncode == 0, result.stderr
        time.sleep(2)
