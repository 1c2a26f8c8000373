"""The local journey's moving parts, shared by the integration tests and `make demo`:
submit real jobs as the testbed's submitter, run a bundle in the second pool, look."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import testbed

from lumberjack.site_spool import install_spool, remote_iwds_from_manifest

JOB_SCRIPT = """#!/bin/sh
# A test job: reads its inputs, writes outputs, exits with the code it is given.
echo "stdout of job $1"
echo "stderr of job $1" >&2
cat "in put.txt" data.txt > result.txt
echo "renamed $1" > renamed.txt
exit "$2"
"""


def chown_tree(path: Path) -> None:
    for item in [path, *path.rglob("*")]:
        os.chown(item, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)


def make_job_dir(workspace: Path, name: str = "job") -> Path:
    job_dir = workspace / name
    (job_dir / "sub").mkdir(parents=True)
    (job_dir / "results").mkdir()
    (job_dir / "run.sh").write_text(JOB_SCRIPT)
    (job_dir / "run.sh").chmod(0o755)
    (job_dir / "in put.txt").write_text("input with a space in its name\n")
    (job_dir / "sub" / "data.txt").write_bytes(os.urandom(2048))
    chown_tree(job_dir)
    return job_dir


def submit(
    job_dir: Path, count: int, exit_codes: dict[int, int] | None = None, **extra: str
) -> int:
    """Submit `count` procs of run.sh from job_dir; returns the cluster id."""
    import htcondor2

    htcondor2.reload_config()
    schedd = htcondor2.Schedd(
        htcondor2.Collector().locate(htcondor2.DaemonType.Schedd, htcondor2.param["SCHEDD_HOST"])
    )
    codes = exit_codes or {}
    description = {
        "executable": str(job_dir / "run.sh"),
        "initialdir": str(job_dir),
        "arguments": "$(Process) $(code)",
        "transfer_input_files": "in put.txt, sub/data.txt",
        "should_transfer_files": "YES",
        "output": "out.$(Process)",
        "error": "err.$(Process)",
        "log": "job.log",
        "transfer_output_remaps": '"renamed.txt = results/renamed-$(Process).txt"',
        "request_memory": "64",
        "request_disk": "1024",
        **extra,
    }
    itemdata = [{"code": str(codes.get(p, 0))} for p in range(count)]
    result = schedd.submit(htcondor2.Submit(description), itemdata=iter(itemdata))
    return result.cluster()


def query(constraint: str, projection: list[str]) -> list[dict]:
    import htcondor2

    schedd = htcondor2.Schedd(
        htcondor2.Collector().locate(htcondor2.DaemonType.Schedd, htcondor2.param["SCHEDD_HOST"])
    )
    return [dict(ad) for ad in schedd.query(constraint=constraint, projection=projection)]


def history(cluster: int, projection: list[str], expect: int, timeout: float = 180) -> list[dict]:
    """Imported finished jobs leave the queue for the history file at the schedd's next
    periodic sweep (up to a minute or two)."""
    import htcondor2

    schedd = htcondor2.Schedd(
        htcondor2.Collector().locate(htcondor2.DaemonType.Schedd, htcondor2.param["SCHEDD_HOST"])
    )
    deadline = time.monotonic() + timeout
    while True:
        ads = [dict(a) for a in schedd.history(f"ClusterId == {cluster}", projection, match=-1)]
        if len(ads) >= expect or time.monotonic() > deadline:
            return sorted(ads, key=lambda a: a["ProcId"])
        time.sleep(0.5)


def lumberjack(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real CLI as a user would."""
    result = subprocess.run(
        [sys.executable, "-m", "lumberjack", *args], capture_output=True, text=True, env=os.environ
    )
    if check and result.returncode != 0:
        raise AssertionError(f"condor_lumberjack {' '.join(args)} failed: {result.stderr}")
    return result


def tree(path: Path) -> dict[str, bytes]:
    return {
        p.relative_to(path).as_posix(): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def run_in_second_pool(bundle: Path, spool: Path, expect_jobs: int, timeout: float = 180) -> None:
    """Start the independent pool from the bundle, wait for every job to finish, stop it."""
    import shutil

    rootfs = testbed.rootfs_path()
    install_spool(
        bundle / "spool",
        spool,
        remote_iwds_from_manifest(bundle / "manifest.json"),
        schedd_ids=testbed.rootfs_ids(rootfs, "condor"),
        job_ids=(testbed.SUBMITTER_UID, testbed.SUBMITTER_UID),
    )
    pool = testbed.remote_pool(spool)
    try:
        pool.start(rootfs)
        deadline = time.monotonic() + timeout
        while True:
            statuses = pool.condor(rootfs, "condor_q", "-allusers", "-af", "JobStatus").split()
            if len(statuses) == expect_jobs and all(s == "4" for s in statuses):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs did not finish in the second pool: {statuses}")
            time.sleep(1)
        pool.condor(rootfs, "condor_off", "-schedd", "-name", f"{pool.name}@{testbed.UID_DOMAIN}")
    finally:
        pool.stop()
        shutil.rmtree(pool.local_dir, ignore_errors=True)


def fetch_back(spool: Path, bundle: Path) -> None:
    """What fetching does for an offline bundle: the remote spool replaces bundle/spool."""
    import shutil

    shutil.rmtree(bundle / "spool")
    shutil.copytree(spool, bundle / "spool", symlinks=True)
