"""The foundation's proof: jobs leave the access point, run in a second real pool from
the bundle, and come back, with every output where the submit file said."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import testbed
from jobs import history, lumberjack, make_job_dir, query, submit, tree

from lumberjack.site_spool import install_spool, remote_iwds_from_manifest

pytestmark = pytest.mark.integration


def run_in_second_pool(bundle: Path, spool: Path, expect_jobs: int, timeout: float = 180) -> None:
    """Start the independent pool from the bundle, wait for every job to finish, stop it."""
    rootfs = testbed.rootfs_path()
    condor_ids = testbed.rootfs_ids(rootfs, "condor")
    install_spool(
        bundle / "spool",
        spool,
        remote_iwds_from_manifest(bundle / "manifest.json"),
        schedd_ids=condor_ids,
        job_ids=(testbed.SUBMITTER_UID, testbed.SUBMITTER_UID),
    )
    pool = testbed.remote_pool(spool)
    try:
        pool.start(rootfs)
        deadline = time.monotonic() + timeout
        while True:
            out = pool.condor(rootfs, "condor_q", "-allusers", "-af", "JobStatus")
            statuses = out.split()
            if len(statuses) == expect_jobs and all(s == "4" for s in statuses):
                break
            assert time.monotonic() < deadline, f"jobs did not finish: {statuses}"
            time.sleep(1)
        pool.condor(rootfs, "condor_off", "-schedd", "-name", f"{pool.name}@{testbed.UID_DOMAIN}")
    finally:
        pool.stop()
        shutil.rmtree(pool.local_dir, ignore_errors=True)


def fetch_back(spool: Path, bundle: Path) -> None:
    """What `fetch` does for an offline bundle: the remote spool replaces bundle/spool."""
    shutil.rmtree(bundle / "spool")
    shutil.copytree(spool, bundle / "spool", symlinks=True)


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
