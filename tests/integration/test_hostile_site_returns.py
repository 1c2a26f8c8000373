"""A hostile return never wedges an export, on the testbed: after a real export's jobs
ran, the site account plants in its remote spool a name with a control character, a
symbolic link, a FIFO, a socket, two hard links, or a 2 GiB sparse file. `fetch` skips
and reports the first kind and takes the rest; a job whose sparse file is over the
per-job cap stays at the site (not a byte of it moves) and comes home held with
HTCondor's code for output over its limit, the other job with it; `cleanup` leaves
nothing.
`sync` refuses a return larger than the free space where it would land, moving nothing,
and brings it home once there is room: the sparse file sparse, fetched and placed."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from journey import (
    SITE_BASE,
    last_json,
    lumberjack,
    make_job_dir,
    query,
    site_leftovers,
    site_path,
    site_run,
    submit,
    sync_one,
    wait_finished,
)

from lumberjack.errors import RemoteError
from lumberjack.profiles.sites import find_profile
from lumberjack.state.ledger import Ledger
from lumberjack.transport import SiteConnection, transfer

pytestmark = pytest.mark.integration

#: What is planted beside a job's outputs, and why fetch must skip each.
PLANTED = {
    "bad\x01name": "unsafe name (contains a control character)",
    "link": "is a symbolic link",
    "fifo": "is a FIFO",
    "sock": "is a socket",
    "twin": "has other hard links (maybe to a file outside the spool)",
    "twin2": "has other hard links (maybe to a file outside the spool)",
}


def finished_at_site(workspace: Path, at_site: list, prefix: str) -> tuple[str, int, str]:
    """Two jobs exported to the testbed site and run there: (name, cluster, the remote
    directory of job 0 in the spool)."""
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 2)
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    exported = last_json(
        lumberjack("export", "--ids", str(cluster), "--site", "testbed", "--nodes", "1",
                   "--walltime", "15m", "--name", name, "--json")
    )  # fmt: skip
    at_site.append(name)
    assert exported["remote_dir"] == f"{SITE_BASE}/{name}"
    lumberjack("ship", name)
    lumberjack("launch", name)
    wait_finished(name, timeout=300)
    spool = f"{SITE_BASE}/{name}/spool"
    return name, cluster, f"{spool}/{cluster}/0/cluster{cluster}.proc0.subproc0"


def odd_entries(root: Path) -> list[str]:
    """Everything below root that is not a plain directory or a file of one name."""
    found = []
    for path in [root, *root.rglob("*")] if root.exists() else []:
        try:
            st = os.lstat(path)
        except FileNotFoundError:  # SQLite's -wal/-shm come and go with each connection
            continue
        if not (stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1)):
            found.append(str(path))
    return found


def wait_nothing_left(name: str, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := site_leftovers(name, f"{SITE_BASE}/{name}")) and time.monotonic() < deadline:
        time.sleep(1)
    return left


def test_bad_entries_are_skipped_reported_and_the_jobs_come_home(
    workspace: Path, state_dir: Path, at_site: list
) -> None:
    name, cluster, job0 = finished_at_site(workspace, at_site, "hostile")
    site_run(
        f"cd {shlex.quote(job0)} && printf evil > \"$(printf 'bad\\001name')\" && "
        "ln -s /etc/passwd link && mkfifo fifo && echo twin > twin && ln twin twin2 && "
        "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")'"
    )

    result = lumberjack("fetch", name, "--json", check=False)
    assert result.returncode == 0, result.stderr  # was exit 3: "refusing unsafe file name"
    fetched = last_json(result)
    assert fetched["phase"] == "fetched"
    prefix = f"{cluster}/0/cluster{cluster}.proc0.subproc0/"
    assert {item["name"]: item["reason"] for item in fetched["skipped"]} == {
        repr(prefix + planted): why for planted, why in PLANTED.items()
    }
    bundle = Ledger().get(name).bundle_dir
    for root in (bundle, state_dir):  # nothing of them written here, wherever returns land
        assert odd_entries(root) == []
        assert not any(p.name in PLANTED for p in root.rglob("*"))

    text = lumberjack("fetch", name).stdout  # again: one summary line names them
    lines = [line for line in text.splitlines() if "skipped:" in line]
    assert len(lines) == 1 and "6 entries the site returned, never written here" in lines[0]
    assert "'" + prefix + "bad\\x01name'" in lines[0]

    imported = last_json(lumberjack("import", name, "--json"))
    assert (imported["jobs"], imported["completed"]) == (2, 2)
    cleaned = last_json(lumberjack("cleanup", name, "--json"))
    assert cleaned["phase"] == "cleaned" and not bundle.exists()
    assert not site_path(f"{SITE_BASE}/{name}").exists()
    assert wait_nothing_left(name) == []


def test_a_job_over_the_per_job_cap_comes_home_held_and_the_rest_with_it(
    workspace: Path, state_dir: Path, at_site: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, cluster, job0 = finished_at_site(workspace, at_site, "sparse")
    site_run(f"truncate -s 2G {shlex.quote(job0)}/huge")
    monkeypatch.setenv("LUMBERJACK_IMPORT_MAX_JOB_BYTES", str(1 << 30))  # the name import knew

    fetched = last_json(lumberjack("fetch", name, "--json"))
    assert list(fetched["over_cap"]) == [f"{cluster}.0"], fetched
    cap = "bytes, over the cap of 1073741824 bytes per job (LUMBERJACK_IMPORT_MAX_JOB_BYTES)"
    assert cap in fetched["over_cap"][f"{cluster}.0"]
    bundle = Ledger().get(name).bundle_dir
    assert [p for p in (bundle, state_dir) for p in p.rglob("huge")] == []
    assert Ledger().get(name).phase == "fetched"

    imported = last_json(lumberjack("import", name, "--json"))
    assert list(imported["held"]) == [f"{cluster}.0"] and imported["completed"] == 1, imported
    (held,) = query(f"ClusterId == {cluster} && ProcId == 0",
                    ["JobStatus", "HoldReason", "HoldReasonCode", "HoldReasonSubCode",
                     "NumJobCompletions"])  # fmt: skip
    assert held["NumJobCompletions"] == 0, held
    assert (held["JobStatus"], held["HoldReasonCode"], held["HoldReasonSubCode"]) == (5, 33, 0)
    assert held["HoldReason"].startswith("Transfer output files failure from site testbed: the job")
    assert cap in held["HoldReason"], held
    job_dir = workspace / "job"
    assert (
        not (job_dir / "out.0").exists() and (job_dir / "out.1").read_text() == "stdout of job 1\n"
    )
    assert b"Code 33 Subcode 0" in (job_dir / "job.log").read_bytes()

    cleaned = last_json(lumberjack("cleanup", name, "--json"))
    assert cleaned["phase"] == "cleaned" and not bundle.exists()
    assert not site_path(f"{SITE_BASE}/{name}").exists()
    assert wait_nothing_left(name) == []


#: `condor_lumberjack ARGS` with a tmpfs of 64 MiB mounted at DIR in a mount namespace of
#: its own (so the file system ends with the command, whatever happens); then the files
#: left on that file system listed into LISTING. sh -c SCRIPT sh DIR LISTING COMMAND...
ON_SMALL_FS = (
    'dir=$1; listing=$2; shift 2; mount -t tmpfs -o size=64m,mode=0700 tmpfs "$dir" || exit 99; '
    '"$@"; code=$?; find "$dir" -type f > "$listing"; exit $code'
)


def real_bytes(path: Path) -> int:
    """Bytes of the file on disk (its blocks), not its length."""
    return os.stat(path).st_blocks * 512


def test_sync_refuses_a_return_past_the_free_space_then_brings_it_home_sparse(
    workspace: Path, state_dir: Path, at_site: list
) -> None:
    name, cluster, job0 = finished_at_site(workspace, at_site, "room")
    site_run(f"truncate -s 2G {shlex.quote(job0)}/huge")  # 2 GiB on paper, no blocks
    returned = Ledger().work_dir(name) / "returned"
    returned.mkdir(mode=0o700, parents=True, exist_ok=True)
    listing = workspace / "left-on-small-fs"

    # cron's path, with the returned spool's file system far smaller than the offer
    command = [sys.executable, "-m", "lumberjack", "sync", "--name", name, "--json"]
    refused = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", ON_SMALL_FS, "sh",
         str(returned), str(listing), *command],
        capture_output=True, text=True, env=os.environ,
    )  # fmt: skip
    assert refused.returncode not in (0, 99), refused.stdout + refused.stderr
    entry = json.loads(refused.stdout)["exports"][0]
    error = entry["error"]
    assert "\n" not in error and error.startswith(f"export {name}: site ")
    assert f"offers 2.0 GiB but {returned} has 64.0 MiB free (keeping 1.0 GiB, " in error
    assert error.endswith("nothing fetched; free space there and sync (or fetch) again")
    assert listing.read_text() == ""  # not a byte of it moved
    assert list(returned.iterdir()) == [] and Ledger().get(name).phase == "finished"

    # room again: the next round fetches and imports, the zeros still holes
    assert sync_one(name)["phase"] == "imported"
    fetched = returned / f"{cluster}/0/cluster{cluster}.proc0.subproc0/huge"
    placed = workspace / "job" / "huge"  # TransferOutput unset: every output to the Iwd
    for path in (fetched, placed):
        assert path.stat().st_size == 2 << 30
        assert real_bytes(path) <= 1 << 20, f"{path}: {real_bytes(path)} bytes on disk"
    print(f"2 GiB sparse at the site: fetched {real_bytes(fetched)} B, placed "
          f"{real_bytes(placed)} B on disk")  # fmt: skip
    cleaned = last_json(lumberjack("cleanup", name, "--json"))
    assert cleaned["phase"] == "cleaned" and wait_nothing_left(name) == []


def test_a_site_that_sends_more_than_it_listed_is_cut_off_not_waited_for(
    access_point, site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = f"{SITE_BASE}/lying-{uuid.uuid4().hex[:6]}"
    site_run(f"mkdir -p {remote} && truncate -s 256M {remote}/big")
    real_scan = transfer.scan

    def lying_scan(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        listing = real_scan(*args, **kwargs)  # as a site lists a file it then lets grow
        listing["big"] = dataclasses.replace(listing["big"], size=10)
        return listing

    def waited(*_: object) -> None:
        raise AssertionError("the download waited for a site that went on sending")

    monkeypatch.setattr(transfer, "scan", lying_scan)
    before = signal.signal(signal.SIGALRM, waited)
    signal.alarm(120)
    try:
        with SiteConnection(find_profile("testbed")) as conn, pytest.raises(RemoteError) as cut:
            conn.download(remote, tmp_path / "back")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
        site_run(f"rm -rf {remote}")
    assert "the site sends bytes 0..268435456 of a file it listed at 10 bytes" in str(cut.value)
    assert [p for p in (tmp_path / "back").rglob("*") if p.stat().st_size] == []
