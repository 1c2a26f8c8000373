"""Site logs and usage come home: on the testbed's real pool, a job held at the site
comes back held with the site's reason and its logs, finished jobs carry what the
starter measured in the local schedd's history, and the import says it in two lines."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest
from journey import history, last_json, lumberjack, make_job_dir, poll_status, query, submit

pytestmark = pytest.mark.integration

HOLD = "The job attribute OnExitHold expression 'ExitCode == 4' evaluated to TRUE"


def test_held_job_and_usage_come_home(workspace: Path, state_dir: Path, at_site: list) -> None:
    job_dir = make_job_dir(workspace)
    # Job 1 fails (exit 3); job 2 exits 4, which its on_exit_hold holds: at the site
    # only, where it runs (the local schedd never runs an exported job).
    cluster = submit(job_dir, 3, exit_codes={1: 3, 2: 4}, arguments="$(Process) $(code) 2",
                     on_exit_hold="ExitCode == 4")  # fmt: skip
    name = f"logs-{uuid.uuid4().hex[:6]}"
    lumberjack("export", "--ids", str(cluster), "--site", "testbed", "--nodes", "1",
               "--walltime", "20m", "--name", name)  # fmt: skip
    at_site.append(name)
    lumberjack("ship", name)
    lumberjack("launch", name)
    poll_status(name, lambda a: a["jobs"] == {"completed": 2, "held": 1}, "two done, one held", 300)

    fetched = last_json(lumberjack("fetch", name, "--json"))
    gathered = fetched["stop"]["logs"]
    assert (gathered["jobs"], gathered["left_out"]) == (3, 0) and gathered["pilot_files"] >= 1
    assert fetched["logs"]["files"] == 3 + gathered["pilot_files"]
    assert fetched["logs"]["skipped"] == []

    imported = lumberjack("import", name)
    lines = imported.stdout.strip().splitlines()
    assert lines[0].startswith(f"imported 3 jobs of {name!r}: 2 completed")
    assert lines[1:] == [
        f"1 job held at the site, held here too: {cluster}.2 "
        f"(condor_lumberjack logs {name} --job ID)"
    ]  # nothing else: the usage is merged, the site's bookkeeping dropped without a word

    held = query(f"ClusterId == {cluster} && ProcId == 2", ["JobStatus", "HoldReason",
                 "HoldReasonCode", "NumHolds", "RemoteWallClockTime", "Managed"])  # fmt: skip
    assert len(held) == 1 and held[0]["JobStatus"] == 5 and "Managed" not in held[0]
    assert held[0]["HoldReason"] == f"at site testbed: {HOLD}"
    assert held[0]["HoldReasonCode"] == 3 and held[0]["NumHolds"] == 1  # counted once
    assert held[0]["RemoteWallClockTime"] >= 2

    usage = ["ProcId", "ExitCode", "MemoryUsage", "ResidentSetSize", "RemoteWallClockTime",
             "RemoteUserCpu", "ActivationDuration", "ActivationExecutionDuration",
             "ActivationSetupDuration", "BlockReads", "DiskUsage", "CumulativeSlotTime",
             "TransferInputStats", "NumJobStarts", "LastRemoteHost", "RemoteHost",
             "MachineAttrCpus0"]  # fmt: skip
    done = history(cluster, usage, expect=2)
    assert [(a["ProcId"], a["ExitCode"]) for a in done] == [(0, 0), (1, 3)]
    for ad in done:
        assert isinstance(ad["MemoryUsage"], int) and ad["MemoryUsage"] >= 1
        assert ad["MemoryUsage"] == (ad["ResidentSetSize"] + 1023) // 1024
        assert ad["RemoteWallClockTime"] >= 2 and ad["CumulativeSlotTime"] >= 2
        assert ad["ActivationExecutionDuration"] >= 1
        assert ad["ActivationDuration"] >= ad["ActivationExecutionDuration"]
        assert ad["ActivationSetupDuration"] >= 0 and ad["BlockReads"] >= 0
        assert ad["DiskUsage"] > 0 and ad["NumJobStarts"] == 1 and ad["RemoteUserCpu"] >= 0
        assert ad["TransferInputStats"]["CedarFilesCountTotal"] >= 3
        assert re.fullmatch(r"slot1_\d+@pilot-\w+-c\d@\S+", ad["LastRemoteHost"])
        assert "RemoteHost" not in ad and "MachineAttrCpus0" not in ad

    one = lumberjack("logs", name, "--job", f"{cluster}.2")
    text = one.stdout
    assert text.startswith(f"job {cluster}.2: held at the site (HoldReasonCode 3): {HOLD}\n")
    for section in ("== StartLog ==", "== StarterLog ==", "== ShadowLog ==", "== SchedLog =="):
        assert section in text
    assert f"Remote job ID is {cluster}.2" in text
    assert f"Starting a VANILLA universe job with ID: {cluster}.2" in text
    assert f"Job {cluster}.2 going into Hold state (code 3,0): {HOLD}" in text
    assert f"Putting job {cluster}.2 on hold" in text
    assert f"ID: {cluster}.0" not in text and f"({cluster}.1)" not in text

    every = json.loads(lumberjack("logs", name, "--json").stdout)
    assert list(every["jobs"]) == [f"{cluster}.{p}" for p in range(3)]
    assert every["jobs"][f"{cluster}.1"] == f"job {cluster}.1: completed at the site, exit code 3"
    assert any("lumberjack pilot: starting 1 startd" in out for out in every["pilots"].values())
    ok = lumberjack("logs", name, "--job", f"{cluster}.0").stdout
    assert "== StartLog ==" in ok and "== StarterLog ==" not in ok  # went well: where it ran

    bad = lumberjack("logs", name, "--job", f"{cluster}.7", check=False)
    assert bad.returncode == 2 and f"job {cluster}.7 is not in export" in bad.stderr

    lumberjack("cleanup", name)
    assert "no site logs" in lumberjack("logs", name).stdout
