"""`sync` as cron runs it, and crashes: no job lost, none run twice, none stuck."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from journey import lumberjack, make_job_dir, query, submit, tree

from lumberjack.ap.schedd import LocalSchedd
from lumberjack.state.ledger import Ledger

pytestmark = pytest.mark.integration


def sync_json(*args: str) -> dict:
    result = lumberjack("sync", "--json", *args, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_sync_hands_back_an_export_that_crashed_half_way(workspace: Path, state_dir: Path) -> None:
    """The process died after the schedd let the jobs go and before the bundle was
    complete (phase `exporting`): sync gives the jobs back to the local schedd."""
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 2)
    ledger = Ledger()
    native = workspace / "crashed" / "native"
    native.mkdir(parents=True)
    for path in (native.parent, native):
        os.chown(path, 4242, 4242)
    ledger.create(
        "crashed", site=None, bundle_dir=native.parent, remote_spool="/elsewhere/spool",
        owner="alice", clusters=[cluster], jobs=[f"{cluster}.0", f"{cluster}.1"],
    )  # fmt: skip
    ledger.set_phase("crashed", "exporting")
    LocalSchedd().export_jobs([cluster], native, "/elsewhere/spool")
    assert {a["Managed"] for a in query(f"ClusterId == {cluster}", ["Managed"])} == {"External"}

    result = sync_json()
    entry = next(e for e in result["exports"] if e["name"] == "crashed")
    assert entry["phase"] == "failed" and entry["steps"][0].startswith("recovered"), entry
    ads = query(f"ClusterId == {cluster}", ["Managed", "JobStatus"])
    assert len(ads) == 2 and all(a.get("Managed") in (None, "ReturnedToSchedd") for a in ads)
    assert sync_json()["exports"] == []  # nothing left to do: failed waits for a person


def test_cron_sync_takes_an_export_home(workspace: Path, state_dir: Path, site) -> None:
    """export --site, then only `sync` (every few seconds, as cron would every minute)."""
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 4)
    before = tree(job_dir)
    lumberjack("export", "--ids", str(cluster), "--site", "testbed", "--name", "cron",
               "--nodes", "3", "--walltime", "15m")  # fmt: skip

    first = sync_json()["exports"][0]
    assert first["steps"][:2] == ["exported", "shipped"], first  # shipped and launched
    # Launch again by hand: the queue is not placed twice and no second pilot goes in.
    again = json.loads(lumberjack("launch", "cron", "--json").stdout)
    assert again["place"]["placed"] is False
    assert again["pilots"]["submitted"] == []

    # A sync that finds the export locked by another process skips it, at once.
    with Ledger().lock("cron"):
        busy = sync_json()["exports"][0]
    assert busy["steps"] == ["busy: skipped"]

    deadline = time.monotonic() + 300
    while (phase := Ledger().get("cron").phase) != "imported":
        assert time.monotonic() < deadline, f"export still {phase}"
        time.sleep(3)
        sync_json()
    after = tree(job_dir)
    assert all(after[f"out.{p}"] == f"stdout of job {p}\n".encode() for p in range(4))
    assert set(before) <= set(after)
    assert sync_json()["exports"] == []  # imported: nothing more for cron to do
    cleaned = json.loads(lumberjack("cleanup", "cron", "--json").stdout)
    assert cleaned["phase"] == "cleaned"
