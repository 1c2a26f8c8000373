"""The local queue's commands reach the site through `sync` alone, as HTCondor-C
forwards them: condor_rm, condor_hold, condor_release and condor_qedit of exported jobs
act on their copies at the site at the next sync; an edit the site must not take holds
the job at home (and keeps the export waiting for a release, as a policy's hold would);
condor_q at home shows where each job is; a job removed at home leaves the queue removed
with one aborted event in its user log; condor_rm -transfer of a running job brings its
outputs home first; condor_prio reaches the site as the edit it is; an edit made before
the first sync reaches the site too. One export of five jobs, one command each.

The same journey records every message that crosses the SSH link (the plans the access
point writes, the agent's answers) and decodes each through the contract, strictly."""

from __future__ import annotations

import time
from pathlib import Path

import htcondor2
import pytest
from journey import (
    lumberjack,
    make_job_dir,
    query,
    site_path,
    submit,
    submitter_command,
    sync_one,
)
from link_messages import every_message_decodes, record_link

from lumberjack.core import jobqueuelog as jql
from lumberjack.core.classad_text import unquote_string
from lumberjack.state.ledger import Ledger

pytestmark = pytest.mark.integration

HOLD_REASON = "wrong input, fixing it"
REMOVE_REASON = "not needed after all"


def _schedd() -> htcondor2.Schedd:
    htcondor2.reload_config()
    location = htcondor2.Collector().locate(
        htcondor2.DaemonType.Schedd, htcondor2.param["SCHEDD_HOST"]
    )
    return htcondor2.Schedd(location)


def _site_queue(name: str) -> dict[str, jql.Ad]:
    """The export's jobs in the site schedd's own log, by "C.P"."""
    ledger_dir = Ledger().get(name).info["remote_dir"]
    ads = jql.read_log(site_path(f"{ledger_dir}/spool/job_queue.log"))
    return {
        f"{jql.parse_key(k).cluster}.{jql.parse_key(k).proc}": ad
        for k, ad in ads.items()
        if jql.key_kind(k) == "proc"
    }


def _ended(cluster: int, where: str) -> dict[int, int]:
    """ProcId -> JobStatus of the cluster's jobs in the queue or in the history."""
    projection = ["ProcId", "JobStatus"]
    if where == "queue":
        ads = query(f"ClusterId == {cluster}", projection)
    else:
        ads = _schedd().history(f"ClusterId == {cluster}", projection, match=-1)
    return {a["ProcId"]: a["JobStatus"] for a in ads}


def _remote_status(job: str) -> int | None:
    cluster, proc = job.split(".")
    ads = query(f"ClusterId == {cluster} && ProcId == {proc}", ["LumberjackRemoteStatus"])
    return ads[0].get("LumberjackRemoteStatus") if ads else None


def _sync_until(name: str, done, what: str, timeout: float = 240) -> int:
    started, rounds = time.monotonic(), 0
    while not done():
        assert time.monotonic() - started < timeout, f"{name}: not {what} after {rounds} syncs"
        if rounds:
            time.sleep(2)
        sync_one(name)
        rounds += 1
    return rounds


#: The kinds of message this journey sends over the link: the two files the access
#: point writes, and the answers of the agent's verbs it runs (sync asks one export's
#: status on its own).
JOURNEY_MESSAGES = {"launch.json", "launch", "status", "queue-actions.json", "act", "stop"}


def test_queue_commands_reach_the_site(
    workspace: Path, state_dir: Path, at_site: list, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    recorded = record_link(monkeypatch, tmp_path)
    job_dir = make_job_dir(workspace, "qc")
    # Long enough (15 s) that every command finds its job still at the site; the last
    # runs until condor_rm -transfer ends it.
    cluster = submit(job_dir, 5, naps={0: 15, 1: 15, 2: 15, 3: 15, 4: 900})
    name = f"qc-{cluster}"
    jobs = [f"{cluster}.{p}" for p in range(5)]
    lumberjack("export", "--ids", str(cluster), "--site", "testbed", "--nodes", "1",
               "--walltime", "15m", "--name", name)  # fmt: skip
    at_site.append(name)
    # An edit made while the export is only exported (before any sync) reaches the site
    # too: edits count from the export, not from the first sync after launch.
    _schedd().edit([jobs[2]], "EarlyTag", '"edited before launch"')
    t0 = time.monotonic()
    _sync_until(name, lambda: Ledger().get(name).phase == "running", "running")
    print(f"running after {time.monotonic() - t0:.0f} s")

    # condor_q at home: where each job is and its state there, kept by sync.
    shown = ["LumberjackSite", "LumberjackExport", "LumberjackRemoteStatus",
             "LumberjackLastSeen", "JobStatus"]  # fmt: skip
    ads = query(f"ClusterId == {cluster}", shown)
    assert {a["LumberjackSite"] for a in ads} == {"testbed"}, ads
    assert {a["LumberjackExport"] for a in ads} == {name}, ads
    running = [a for a in ads if a["LumberjackRemoteStatus"] == 2]
    assert running and all(a["JobStatus"] == 2 for a in running), ads

    schedd = _schedd()
    # The bindings (25.14) leave RemoveReason and HoldReason unset whatever `reason`
    # says; condor_rm -reason and condor_hold -reason set them: so does the test.
    schedd.edit([jobs[0]], "RemoveReason", f'"{REMOVE_REASON}"')
    schedd.act(htcondor2.JobAction.Remove, [jobs[0]], reason=REMOVE_REASON)
    schedd.act(htcondor2.JobAction.Hold, [jobs[1]], reason=HOLD_REASON)
    schedd.edit([jobs[1]], "HoldReason", f'"{HOLD_REASON}"')
    schedd.edit([jobs[2]], "MyTag", '"edited at home"')
    schedd.edit([jobs[2]], "JobPrio", "7")  # what condor_prio -p 7 does
    schedd.edit([jobs[3]], "Out", '"elsewhere.out"')  # a path: the site must not take it
    entry = sync_one(name)
    assert any(step.startswith("queue commands:") for step in entry["steps"]), entry

    there = _site_queue(name)
    assert there[jobs[0]].get("JobStatus") == "3", there[jobs[0]].attrs
    # The site's condor_rm/condor_hold add "(by user <site account>)" to the home reason.
    assert unquote_string(there[jobs[0]].get("RemoveReason") or "").startswith(REMOVE_REASON)
    assert there[jobs[1]].get("JobStatus") == "5"
    assert unquote_string(there[jobs[1]].get("HoldReason") or "").startswith(HOLD_REASON)
    assert there[jobs[2]].get("MyTag") == '"edited at home"'
    assert there[jobs[2]].get("EarlyTag") == '"edited before launch"', there[jobs[2]].attrs
    assert there[jobs[2]].get("JobPrio") == "7", there[jobs[2]].attrs
    assert there[jobs[3]].get("Out") != '"elsewhere.out"'
    assert there[jobs[3]].get("JobStatus") == "5"
    (refused,) = query(f"ClusterId == {cluster} && ProcId == 3", ["JobStatus", "HoldReason"])
    assert refused["JobStatus"] == 5 and "condor_qedit of Out" in refused["HoldReason"], refused
    (held,) = query(f"ClusterId == {cluster} && ProcId == 1", ["LumberjackRemoteStatus"])
    assert held["LumberjackRemoteStatus"] == 5, held

    schedd.act(htcondor2.JobAction.Release, [jobs[1]])
    sync_one(name)
    assert _site_queue(name)[jobs[1]].get("JobStatus") in ("1", "2")
    # Held from home, the job keeps its export waiting for a release (as a policy's
    # would); removed at home, it lets the export come home.
    assert Ledger().get(name).phase == "running"
    schedd.act(htcondor2.JobAction.Remove, [jobs[3]])
    # condor_rm -transfer of a job running at the site: its outputs come home first.
    _sync_until(name, lambda: _remote_status(jobs[4]) == 2, "running job 4")
    ran = submitter_command(f"condor_rm -transfer {jobs[4]}")  # the bindings have no -transfer
    said = ran.stdout + ran.stderr
    assert "marked for removal after file transfer" in said, said

    rounds = _sync_until(name, lambda: Ledger().get(name).phase == "imported", "imported", 300)
    print(f"{name}: imported by sync after {rounds} more rounds, {time.monotonic() - t0:.0f} s")

    # Removed at home: out of the queue into the history, one aborted event each. The
    # others completed (in the queue until the schedd's next sweep moves them).
    ended = {**_ended(cluster, "history"), **_ended(cluster, "queue")}
    assert ended == {0: 3, 1: 4, 2: 4, 3: 3, 4: 3}, ended
    assert _ended(cluster, "history").get(0) == 3
    # -transfer brought job 4's outputs (its remap too); a plain condor_rm brought none.
    assert (job_dir / "results" / "renamed-4.txt").read_text() == "renamed 4\n"
    assert (job_dir / "out.4").read_text() == "stdout of job 4\n"
    assert not (job_dir / "results" / "renamed-0.txt").exists()
    log = (job_dir / "job.log").read_text()
    for proc in (0, 3, 4):
        assert log.count(f"009 ({cluster:03d}.{proc:03d}.000)") == 1, log
        assert f"005 ({cluster:03d}.{proc:03d}.000)" not in log
    assert f"005 ({cluster:03d}.002.000)" in log and f"005 ({cluster:03d}.001.000)" in log
    every_message_decodes(recorded, JOURNEY_MESSAGES)
