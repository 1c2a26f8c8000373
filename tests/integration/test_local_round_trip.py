"""The foundation's proof: jobs leave the access point, run in a second real pool from
the bundle, and come back, with every output where the submit file said."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import testbed
from journey import (
    fetch_back,
    history,
    lumberjack,
    make_job_dir,
    query,
    run_in_second_pool,
    submit,
    tree,
)

pytestmark = pytest.mark.integration


def test_export_run_elsewhere_import(workspace: Path, state_dir: Path) -> None:
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 3, exit_codes={2: 3})
    before = tree(job_dir)
    bundle = workspace / "bundle"
    spool = workspace / "remote-spool"

    out = lumberjack(
        "export", "--ids", str(cluster), "--out", str(bundle), "--remote-spool", str(spool),
        "--name", "roundtrip", "--json",
    )  # fmt: skip
    exported = json.loads(out.stdout)
    assert exported["jobs"] == [f"{cluster}.{p}" for p in range(3)]
    managed = query(f"ClusterId == {cluster}", ["Managed", "ManagedManager", "JobStatus"])
    assert {(a["Managed"], a["ManagedManager"]) for a in managed} == {("External", "Lumberjack")}
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["jobs"] == exported["jobs"]
    assert all(len(f["sha256"]) == 64 for f in manifest["files"])

    run_in_second_pool(bundle, spool, expect_jobs=3)
    fetch_back(spool, bundle)

    imported = json.loads(lumberjack("import", "--in", str(bundle), "--json").stdout)
    assert imported["completed"] == 3

    ads = history(cluster, ["ProcId", "JobStatus", "ExitCode", "Managed", "Out", "Iwd"], expect=3)
    assert [a["ExitCode"] for a in ads] == [0, 0, 3]
    assert all(a["JobStatus"] == 4 and "Managed" not in a for a in ads)
    assert all(a["Out"] == f"out.{a['ProcId']}" and a["Iwd"] == str(job_dir) for a in ads)
    assert query(f"ClusterId == {cluster}", ["ProcId"]) == []

    after = tree(job_dir)
    expected_inputs = before["in put.txt"] + before["sub/data.txt"]
    new_files = {name for name in after if name not in before}
    assert new_files == {
        *(f"out.{p}" for p in range(3)),
        *(f"err.{p}" for p in range(3)),
        *(f"results/renamed-{p}.txt" for p in range(3)),
        "result.txt",
    }
    for p in range(3):
        assert after[f"out.{p}"] == f"stdout of job {p}\n".encode()
        assert after[f"err.{p}"] == f"stderr of job {p}\n".encode()
        assert after[f"results/renamed-{p}.txt"] == f"renamed {p}\n".encode()
    assert after["result.txt"] == expected_inputs
    # The submit event was written at submit time; the site's events are appended to it.
    assert after["job.log"].startswith(before["job.log"])
    assert after["job.log"].count(b"Job terminated") == 3
    assert all(after[name] == before[name] for name in before if name != "job.log")
    assert os.stat(job_dir / "out.0").st_uid == testbed.SUBMITTER_UID
