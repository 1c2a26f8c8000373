"""Conformance: every case of tests/integration/conformance/ (see conformance_cases.py)
behaves through lumberjack as in a plain HTCondor pool.

Each case is submitted twice as the submitter, from a fresh copy of its directory: to a
reference pool of its own (reference_pool.py: a schedd and a startd, as at home) and to
the access point, whose jobs go to the testbed site in ONE export driven only by
`condor_lumberjack sync` rounds, as cron runs them (as root for the submitter), until
the export is imported. Both runs go on at once. Then, per case and job: the default
attributes, the case's own, where the job is (queue or history), the sequence of its
user-log events (htcondor2.JobEventLog), its stdout, stderr and `files`; only the
case's `differ` attributes may differ.

The same export carries one more job, no case: it returns more than the per-job return
cap this run sets, and must come home held with HTCondor's code for output over its
limit while every case comes home (issue 34 item 5, through `sync`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import testbed
from conformance_cases import (
    EVENTS,
    Case,
    all_cases,
    differences,
    event_sequence,
    observed,
    settled,
)
from journey import SITE_BASE, chown_tree, lumberjack, stop_at_site, sync_one
from reference_pool import reference_pool

from lumberjack.core.returns import HOLD_OVER_CAP, MAX_JOB_BYTES_ENV
from lumberjack.state.ledger import Ledger

pytestmark = pytest.mark.integration

CASES = all_cases()
CLIENT = Path(__file__).resolve().parent / "conformance_client.py"
#: The per-job return cap of this run: above every case's outputs, below OVER_CAP_BYTES.
RETURN_CAP = 3 << 20
OVER_CAP_BYTES = 4 << 20
OVER_CAP_JOB = """executable = job.sh
output = out
error = err
log = job.log
transfer_output_files = big.bin
request_memory = 64
queue
"""
#: Seconds: sync rounds until imported, then until both pools' jobs are settled.
SYNC_TIMEOUT, SETTLE_TIMEOUT, ROUND_PAUSE = 480, 180, 3


@dataclass
class Runs:
    """Per case, per ProcId: what was observed in each run."""

    reference: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    lumberjack: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    over_cap: list[dict[str, Any]] = field(default_factory=list)
    over_cap_dir: Path | None = None
    seconds: float = 0.0


def client(env: dict[str, str], command: str, argument: Any) -> Any:
    """conformance_client.py against the pool `env` names."""
    result = subprocess.run(
        [sys.executable, str(CLIENT), command, json.dumps(argument)],
        capture_output=True, text=True, env={**os.environ, **env},
    )  # fmt: skip
    assert result.returncode == 0, f"conformance_client {command}: {result.stderr.strip()}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def copy_cases(cases: list[Case], into: Path) -> dict[str, str]:
    """A fresh copy of each case directory, the submitter's: case -> its path."""
    copies = {}
    for case in cases:
        target = into / case.name
        shutil.copytree(case.directory, target, symlinks=True)
        copies[case.name] = str(target)
    into.chmod(0o755)
    chown_tree(into)
    return copies


def over_cap_job(into: Path) -> Path:
    """A job whose output is over RETURN_CAP (not a case: a plain pool has no such cap)."""
    into.mkdir()
    (into / "job.sub").write_text(OVER_CAP_JOB)
    (into / "job.sh").write_text(f"#!/bin/sh\nhead -c {OVER_CAP_BYTES} /dev/zero > big.bin\n"
                                 "echo wrote big.bin\n")  # fmt: skip
    (into / "job.sh").chmod(0o755)
    chown_tree(into)
    return into


def wait_settled(env: dict[str, str], clusters: list[int], attrs: list[str]) -> dict[str, list]:
    """Snapshots until every job of `clusters` is in the state it keeps."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        jobs = client(env, "snapshot", {"clusters": clusters, "attrs": attrs})
        waiting = [f"{c}.{j['ad'].get('ProcId')}" for c, procs in jobs.items() for j in procs
                   if not settled(j["ad"], j["in_queue"])]  # fmt: skip
        if not waiting and all(jobs.values()):
            return jobs
        assert time.monotonic() < deadline, f"jobs not settled after {SETTLE_TIMEOUT} s: {waiting}"
        time.sleep(2)


def events_of(log: Path, cluster: int, proc: int) -> list[str]:
    """The ULOG_ names of the events of job cluster.proc in the user log `log`."""
    import htcondor2

    if not log.exists():
        return []
    names = []
    with htcondor2.JobEventLog(str(log)) as events:
        for event in events.events(stop_after=0):
            if (event.cluster, event.proc) == (cluster, proc):
                names.append(f"ULOG_{htcondor2.JobEventType(event.type).name}")
    return names


def read_or_none(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def observe(case: Case, submit_dir: Path, jobs: list[dict[str, Any]]) -> dict[int, dict]:
    """What is compared of each job of one case in one run, by ProcId."""
    found = {}
    for job in jobs:
        ad = job["ad"]
        iwd = Path(ad.get("Iwd") or submit_dir)
        log = iwd / ad["UserLog"] if ad.get("UserLog") else submit_dir / "no-log"
        out = iwd / ad["Out"] if ad.get("Out") else None
        err = iwd / ad["Err"] if ad.get("Err") else None
        files = {name: read_or_none(submit_dir / name) for name in case.files}
        found[ad["ProcId"]] = observed(
            ad, case, job["in_queue"], events_of(log, ad["ClusterId"], ad["ProcId"]),
            read_or_none(out) if out else None, read_or_none(err) if err else None, files,
        )  # fmt: skip
    return found


def attrs_of(cases: list[Case]) -> list[str]:
    names = ["PeriodicRelease", "LeaveJobInQueue", "HoldReason"]
    for case in cases:
        names += case.attrs
    return list(dict.fromkeys(names))


def drive_by_sync(name: str) -> int:
    """`sync` rounds (as cron runs it) until the export is imported; the rounds."""
    started, rounds = time.monotonic(), 0
    while (phase := Ledger().get(name).phase) != "imported":
        elapsed = time.monotonic() - started
        assert elapsed < SYNC_TIMEOUT, f"{name} still {phase} after {rounds} syncs"
        if rounds:
            time.sleep(ROUND_PAUSE)
        sync_one(name)
        rounds += 1
    return rounds


@pytest.fixture(scope="module")
def runs(access_point: testbed.Pool, site: Any) -> Iterator[Runs]:
    started = time.monotonic()
    work = testbed.testbed_dir() / "work" / f"conformance-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    work.mkdir(parents=True, mode=0o755)
    saved = {k: os.environ.get(k) for k in ("LUMBERJACK_STATE_DIR", MAX_JOB_BYTES_ENV)}
    os.environ["LUMBERJACK_STATE_DIR"] = str(testbed.root_state_dir(work.name))
    os.environ[MAX_JOB_BYTES_ENV] = str(RETURN_CAP)
    ref_dirs = copy_cases(CASES, work / "reference")
    lj_dirs = copy_cases(CASES, work / "lumberjack")
    big = over_cap_job(work / "over-cap")
    attrs = attrs_of(CASES)
    name = f"conformance-{uuid.uuid4().hex[:6]}"
    ap_env = testbed.ACCESS_POINT.client_env_of(testbed.SUBMITTER)
    home: list[int] = []
    try:
        with reference_pool() as pool:
            ref_env = pool.client_env_of(testbed.SUBMITTER)
            ref_clusters = client(ref_env, "submit", ref_dirs)
            lj_clusters = client(ap_env, "submit", {**lj_dirs, "over-cap": str(big)})
            home = list(lj_clusters.values())
            lumberjack("export", "--ids", *map(str, home), "--site", "testbed", "--nodes",
                       "2", "--walltime", "20m", "--name", name)  # fmt: skip
            rounds = drive_by_sync(name)
            print(f"{name}: imported by sync after {rounds} rounds")
            ref_jobs = wait_settled(ref_env, list(ref_clusters.values()), attrs)
        lj_jobs = wait_settled(ap_env, home, attrs)
        result = Runs(over_cap_dir=big)
        for case in CASES:
            result.reference[case.name] = observe(
                case, Path(ref_dirs[case.name]), ref_jobs[str(ref_clusters[case.name])]
            )
            result.lumberjack[case.name] = observe(
                case, Path(lj_dirs[case.name]), lj_jobs[str(lj_clusters[case.name])]
            )
        result.over_cap = lj_jobs[str(lj_clusters["over-cap"])]
        result.seconds = time.monotonic() - started
        print(f"conformance: {len(CASES)} cases in {result.seconds:.0f} s")
        yield result
    finally:
        stop_at_site(name, f"{SITE_BASE}/{name}")
        if home:  # held and left-in-queue jobs would stay in the submitter's queue
            client(ap_env, "remove", home)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_job_behaves_as_in_a_plain_pool(runs: Runs, case: Case) -> None:
    reference, through = runs.reference[case.name], runs.lumberjack[case.name]
    assert sorted(reference) == sorted(through), (
        f"{case.name}: procs {sorted(reference)} in the reference pool, "
        f"{sorted(through)} through lumberjack"
    )
    assert all(job[EVENTS] for job in reference.values()), f"{case.name}: no events read"
    problems = []
    for proc in sorted(reference):
        problems += differences(case, f"{case.name}.{proc}", reference[proc], through[proc])
    assert not problems, f"{case.why}\n" + "\n".join(problems)


def test_a_job_over_the_return_cap_comes_home_held_and_the_rest_with_it(runs: Runs) -> None:
    (job,) = runs.over_cap
    ad = job["ad"]
    assert job["in_queue"] and ad["JobStatus"] == 5, ad
    assert (ad["HoldReasonCode"], ad["HoldReasonSubCode"]) == (HOLD_OVER_CAP, 0), ad
    assert ad.get("NumJobCompletions") == 0, ad  # its output never arrived: not completed
    assert f"over the cap of {RETURN_CAP} bytes per job ({MAX_JOB_BYTES_ENV})" in ad["HoldReason"]
    assert "returns " in ad["HoldReason"] and "site testbed" in ad["HoldReason"], ad
    assert runs.over_cap_dir is not None
    assert not (runs.over_cap_dir / "big.bin").exists()
    assert not (runs.over_cap_dir / "out").exists()
    cluster = ad["ClusterId"]
    events = events_of(runs.over_cap_dir / "job.log", cluster, 0)
    assert events[-1] == "ULOG_JOB_HELD" and "ULOG_JOB_TERMINATED" not in events, events
    # HTCondor's own hold of a job whose output is over its limit, event by event: the
    # error (021), the eviction (004) and the hold (012), as the reference pool wrote them.
    (reference,) = runs.reference["max_transfer_output"].values()
    assert event_sequence(events) == reference[EVENTS], (events, reference[EVENTS])
    # ... and every case came home: each case's jobs were compared above
    assert all(runs.lumberjack[case.name] for case in CASES)
