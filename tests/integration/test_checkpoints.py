"""A self-checkpointing job across two pilots, and home: it counts to N, one step per
execution, checkpointing after each (checkpoint_exit_code).

- Its pilot is killed mid-run; the next pilot continues from the checkpoint the remote
  schedd kept, never from 0.
- Its pilot is killed mid-run and the export ends (fetch, import) with the job
  unfinished: import puts the checkpoint into the local schedd's spool directory for the
  job, and the local schedd runs it on from the site's count. The access point's pool
  has no startd (exported jobs must stay idle there) and other tests share its schedd:
  this test starts a startd of its own, with its own config and directories, whose START
  takes this test's job only, and stops it by PID.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import testbed
from journey import (
    alive_pilots,
    chown_tree,
    history,
    last_json,
    lumberjack,
    poll_status,
    query,
    site_path,
    site_run,
    submit,
    sync_one,
)

from lumberjack.state.ledger import Ledger

pytestmark = pytest.mark.integration

STEPS = 8
COUNTER = """#!/bin/sh
# One step per execution: resume from count.txt, work, checkpoint, exit 85 (checkpoint
# taken, run me again) until the count is reached. steps.txt names the pilot of each step
# (the host, where no pilot runs it).
n=$(cat count.txt 2>/dev/null || echo 0)
n=$((n + 1))
sleep 3
pilot=$(sed -n 's/^LUMBERJACK_PILOT = "\\(.*\\)"$/\\1/p' "$_CONDOR_MACHINE_AD")
echo "step $n pilot ${pilot:-$(hostname)}" >> steps.txt
echo "$n" > count.txt
if [ "$n" -ge "$1" ]; then exit 0; fi
exit 85
"""


def counted(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def counter_at_site(
    workspace: Path, at_site: list, steps: int, **extra: str
) -> tuple[int, Path, str, Path]:
    """The counter to `steps` (`extra`: more submit commands), exported to the testbed
    site, its first pilot running it until its third checkpoint: (cluster, job dir,
    export name, the checkpoint's count.txt in the remote schedd's spool)."""
    job_dir = workspace / "counter"
    job_dir.mkdir()
    (job_dir / "count.sh").write_text(COUNTER)
    (job_dir / "count.sh").chmod(0o755)
    chown_tree(job_dir)
    cluster = submit(
        job_dir, 1, executable=str(job_dir / "count.sh"), arguments=str(steps),
        transfer_input_files="", transfer_output_files="count.txt, steps.txt",
        checkpoint_exit_code="85", transfer_checkpoint_files="count.txt, steps.txt", **extra,
    )  # fmt: skip
    name = f"ckpt-{uuid.uuid4().hex[:6]}"
    at_site.append(name)
    exported = last_json(lumberjack(
        "export", "--ids", str(cluster), "--site", "testbed", "--name", name, "--nodes", "1",
        "--cores", "1", "--walltime", "20m", "--json",
    ))  # fmt: skip
    assert sync_one(name)["phase"] == "launched"
    # The remote schedd keeps the checkpoint in the job's spool directory.
    checkpoint = site_path(exported["remote_dir"]) / "spool" / str(cluster) / "0"
    checkpoint = checkpoint / f"cluster{cluster}.proc0.subproc0" / "count.txt"
    deadline = time.monotonic() + 300
    while counted(checkpoint) < 3:
        assert time.monotonic() < deadline, f"no third checkpoint: {counted(checkpoint)}"
        time.sleep(1)
    return cluster, job_dir, name, checkpoint


def cancel_the_pilot(name: str) -> str:
    """scancel the pilot running the export's job; its batch job id."""
    running = poll_status(name, lambda a: a["jobs"].get("running") == 1, "running")
    (pilot,) = alive_pilots(running)
    site_run(f"scancel {pilot}")
    poll_status(name, lambda a: not alive_pilots(a), "without a pilot", timeout=120)
    return pilot


def steps_and_pilots(job_dir: Path, steps: int) -> list[str]:
    """Who ran each step, checked to be every step once, in order, none again."""
    lines = (job_dir / "steps.txt").read_text().splitlines()
    assert [int(line.split()[1]) for line in lines] == list(range(1, steps + 1)), lines
    assert (job_dir / "count.txt").read_text().strip() == str(steps)
    return [line.split()[3] for line in lines]


def test_a_counter_resumes_from_its_checkpoint_on_the_next_pilot(
    workspace: Path, state_dir: Path, at_site: list
) -> None:
    cluster, job_dir, name, checkpoint = counter_at_site(workspace, at_site, STEPS)
    pilot = cancel_the_pilot(name)
    at_kill = counted(checkpoint)
    assert 3 <= at_kill < STEPS
    poll_status(name, lambda a: not a["jobs"].get("running"), "back to idle", timeout=600)
    assert counted(checkpoint) >= at_kill  # the checkpoint stays in the remote SPOOL

    deadline = time.monotonic() + 600
    while Ledger().get(name).phase != "imported":  # a new pilot, the rest, fetch, import
        assert time.monotonic() < deadline, Ledger().get(name).phase
        sync_one(name)
        time.sleep(3)

    pilots = steps_and_pilots(job_dir, STEPS)  # each step once, never from 0 again
    first, second = pilots[0], pilots[-1]
    assert first == pilot.split(".")[0] and second != first, pilots
    switch = pilots.index(second)
    assert pilots == [first] * switch + [second] * (STEPS - switch), pilots
    assert switch >= 3  # the second pilot began where the first one's checkpoint ended
    (ad,) = history(cluster, ["ProcId", "JobStatus", "ExitCode"], expect=1)
    assert (ad["JobStatus"], ad["ExitCode"]) == (4, 0)


@contextmanager
def local_startd(name: str, cluster: int) -> Iterator[str]:
    """A startd in the access point's pool that runs only jobs of `cluster`; its host name.

    Its own condor_master (no shared port: the pool's is the pool's), LOCAL_DIR and log;
    the pool's keys, so that it authenticates as the pool's own daemons do.
    """
    rootfs = testbed.rootfs_path()
    pool = testbed.ACCESS_POINT
    root = testbed.testbed_dir() / "work" / f"{name}-startd"
    local = root / "local"
    condor = testbed.rootfs_ids(rootfs, "condor")
    for sub in ("log", "execute", "lock", "run", "spool"):
        (local / sub).mkdir(parents=True, exist_ok=True)
        os.chown(local / sub, *condor)
    os.chmod(local / "execute", 0o755)
    config = root / "condor_config"
    config.write_text(
        f"""include : {pool.config_file}
LOCAL_DIR = {local}
SPOOL = $(LOCAL_DIR)/spool
SEC_PASSWORD_DIRECTORY = {pool.local_dir}/passwords.d
SEC_TOKEN_SYSTEM_DIRECTORY = {pool.local_dir}/tokens.d
DAEMON_LIST = MASTER, STARTD
MASTER_NAME = {name}@{testbed.UID_DOMAIN}
STARTD_NAME = {name}@{testbed.UID_DOMAIN}
USE_SHARED_PORT = FALSE
NUM_CPUS = 1
START = TARGET.ClusterId == {cluster} && TARGET.Owner == "{testbed.SUBMITTER}"
"""
    )
    host = f"{name}.{testbed.UID_DOMAIN}"
    pid = testbed.spawn_in_rootfs(
        rootfs, ["/usr/sbin/condor_master", "-f"], hostname=host,
        binds=[str(testbed.testbed_dir())], logfile=root / "master.out",
        env={"CONDOR_CONFIG": str(config)},
    )  # fmt: skip
    try:
        yield host
    finally:
        testbed.stop_pid(pid)
        # A startd that dies hard leaves its slots in the collector: matches to nowhere.
        query_ad = root / "invalidate.ad"
        query_ad.write_text(f'MyType = "Query"\nTargetType = "Machine"\nRequirements = '
                            f'Machine == "{host}"\n')  # fmt: skip
        pool.condor(rootfs, "condor_advertise", "INVALIDATE_STARTD_ADS", str(query_ad),
                    check=False)  # fmt: skip


def test_an_unfinished_job_resumes_at_home_from_the_sites_checkpoint(
    workspace: Path, state_dir: Path, at_site: list
) -> None:
    # Other tests leave idle jobs in the shared schedd, which offers its negotiator only
    # the first ones of a submitter in priority order: this one goes first.
    cluster, job_dir, name, _ = counter_at_site(workspace, at_site, STEPS, priority="10")
    pilot = cancel_the_pilot(name).split(".")[0]

    # The export ends with the job unfinished: no new pilot, the spool comes home.
    lumberjack("fetch", name, "--json")
    started = time.monotonic()
    imported = last_json(lumberjack("import", name, "--json"))
    import_seconds = time.monotonic() - started
    assert imported["handed_back_idle"] == 1 and imported["completed"] == 0
    assert imported["resume_from_site"] == [f"{cluster}.0"] and imported["start_anew"] == {}

    # The checkpoint is where the local schedd's shadow sends it from: its spool.
    spool_dir = testbed.ACCESS_POINT.spool_dir / str(cluster) / "0"
    local_dir = spool_dir / f"cluster{cluster}.proc0.subproc0"
    at_home = counted(local_dir / "count.txt")
    assert 3 <= at_home < STEPS
    info = local_dir.stat()
    assert (info.st_uid, oct(info.st_mode & 0o777)) == (testbed.SUBMITTER_UID, "0o700")
    assert spool_dir.stat().st_uid == testbed.rootfs_ids(testbed.rootfs_path(), "condor")[0]
    (ad,) = query(f"ClusterId == {cluster}", ["JobStatus", "Managed"])
    assert ad["JobStatus"] == 1 and "Managed" not in ad

    with local_startd(f"ckhome-{os.getpid()}", cluster) as host:
        (done,) = history(cluster, ["ProcId", "JobStatus", "ExitCode"], expect=1, timeout=600)
        elapsed = time.monotonic() - started
    assert (done["JobStatus"], done["ExitCode"]) == (4, 0), done

    # The first steps ran at the site, the rest here from the site's count on, none again.
    pilots = steps_and_pilots(job_dir, STEPS)
    assert pilots == [pilot] * at_home + [host] * (STEPS - at_home), pilots
    print(
        f"\ncheckpoint home: {at_home} of {STEPS} steps at the site, {STEPS - at_home} here; "
        f"import {import_seconds:.1f} s, import to local completion {elapsed:.1f} s"
    )
