"""Site logs: what the agent gathers from an export's logs (lines as HTCondor 25 writes
them), within its caps, and how the access point reads them back as hostile text."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import load_fixture_module

from lumberjack.ap import site_logs
from lumberjack.cli import cli
from lumberjack.core import jobqueuelog as jql
from lumberjack.core.jobqueuelog_write import write_log
from lumberjack.errors import BadInput
from lumberjack.site import gather_logs
from lumberjack.site.gather_logs import FILE_MAX, gather
from lumberjack.state.ledger import Ledger

site_bundle = load_fixture_module("site_bundle")

T = "11/25/26 03:39:07"
START_LOG = f"""{T} slot1: Request accepted.
{T} slot1_1: Got activate_claim request from shadow (10.251.0.2)
{T} slot1_1: Remote job ID is 9.0
{T} slot1_1: State change: claim-activation protocol successful, Starter 100
{T} slot1_1[9.0]: Received final job ClassAd update from starter. 0 unread bytes
{T} Starter pid 100 exited with status 0
{T} slot1_1: Got activate_claim request from shadow (10.251.0.2)
{T} slot1_1: Remote job ID is 9.1
{T} slot1_1: State change: claim-activation protocol successful, Starter 200
{T} slot1_1: Changing activity: Busy -> Cleaning
{T} Starter pid 200 exited with status 0
"""
STARTER_LOG = f"""{T} (pid:100) ******************************************************
{T} (pid:100) ** condor_starter (CONDOR_STARTER) STARTING UP
{T} (pid:100) Starting a VANILLA universe job with ID: 9.0
{T} (pid:100) **** condor_starter (condor_STARTER) pid 100 EXITING WITH STATUS 0
{T} (pid:200) ******************************************************
{T} (pid:200) ** condor_starter (CONDOR_STARTER) STARTING UP
{T} (pid:200) Starting a VANILLA universe job with ID: 9.1
{T} (pid:200) Process exited, pid=300, status=4 \x1b[31mred\x07
{T} (pid:200) **** condor_starter (condor_STARTER) pid 200 EXITING WITH STATUS 0
"""
SHADOW_LOG = f"""{T} Initializing a VANILLA shadow for job 9.0
{T} (9.0) (40): Job 9.0 terminated: exited with status 0
{T} (?.?) (40): Switching to new job 9.1
{T} (9.1) (40): Job 9.1 going into Hold state (code 3,0): OnExitHold evaluated to TRUE
{T} (9.10) (41): another job of another cluster size
"""
SCHED_LOG = f"""{T} (pid:26) Shadow pid 40 for job 9.1 exited with status 112
{T} (pid:26) Putting job 9.1 on hold
{T} (pid:26) match (slot1_1@pilot-1-c1@hpc-login <10.251.9.1:45517?addrs=10.251.9.1-45517>)
"""


def job(status: int, **attrs: str) -> dict[str, str]:
    return {"JobStatus": str(status), "NumJobStarts": "1", **attrs}


def make_export(root: Path) -> Path:
    ads = {
        "09.-1": jql.Ad("09.-1", "Job", "Machine", {"Cmd": '"/bin/sh"'}),
        "9.0": jql.Ad("9.0", "Job", "Machine", job(4, ExitCode="0")),
        "9.1": jql.Ad(
            "9.1",
            "Job",
            "Machine",
            job(5, HoldReasonCode="3", HoldReason='"OnExitHold evaluated to TRUE"'),
        ),  # fmt: skip
        "9.2": jql.Ad("9.2", "Job", "Machine", {"JobStatus": "1"}),
    }
    (root / "spool").mkdir(parents=True)
    write_log(root / "spool" / "job_queue.log", ads)
    node = root / "pilots" / "nodes" / "pilot-1-c1" / "log"
    node.mkdir(parents=True)
    (node / "StartLog").write_text(START_LOG)
    (node / "StarterLog.slot1_1").write_text(STARTER_LOG)
    out = root / "pilots" / "out"
    out.mkdir()
    (out / "lj-calib-1-1.out").write_text("pilot: starting\x1b]0;title\x07 1 startd\n")
    os.symlink("/etc/passwd", out / "lj-calib-1-1.err")
    pool = root / "pool" / "local" / "log"
    pool.mkdir(parents=True)
    (pool / "ShadowLog").write_text(SHADOW_LOG)
    (pool / "SchedLog").write_text(SCHED_LOG)
    return root


def test_held_job_gets_every_log_and_a_completed_one_its_start_lines(tmp_path: Path) -> None:
    root = make_export(tmp_path / "calib")
    answer = gather(str(root), site_bundle.launch_plan())
    assert (answer.pilot_files, answer.jobs, answer.left_out) == (1, 3, 0)
    logs = root / gather_logs.LOGS_DIR
    held = (logs / "jobs" / "9.1.log").read_text()
    lines = held.splitlines()
    assert lines[0] == "job 9.1: held at the site (HoldReasonCode 3): OnExitHold evaluated to TRUE"
    assert f"{T} slot1_1: Remote job ID is 9.1" in lines
    assert f"{T} slot1_1: Got activate_claim request from shadow (10.251.0.2)" in lines
    assert f"{T} Starter pid 200 exited with status 0" in lines
    assert f"{T} (pid:200) ** condor_starter (CONDOR_STARTER) STARTING UP" in lines
    assert f"{T} (pid:200) Process exited, pid=300, status=4 ?[31mred?" in lines
    assert (
        f"{T} (9.1) (40): Job 9.1 going into Hold state (code 3,0): OnExitHold evaluated to TRUE"
        in lines
    )
    assert f"{T} (pid:26) Putting job 9.1 on hold" in lines
    assert "9.0" not in held.replace("10.251.0.2", "")  # no other job's lines
    assert "(9.10)" not in held and "10.251.9.1" not in held  # ids are whole tokens
    done = (logs / "jobs" / "9.0.log").read_text()
    assert done.splitlines()[0] == "job 9.0: completed at the site, exit code 0"
    assert f"{T} slot1_1: Remote job ID is 9.0" in done and "== StarterLog ==" not in done
    assert "ShadowLog" not in done and "9.1" not in done
    assert (logs / "jobs" / "9.2.log").read_text() == "job 9.2: idle at the site\n"
    assert os.listdir(logs / "pilots") == ["lj-calib-1-1.out"]  # the link is not followed
    assert (
        logs / "pilots" / "lj-calib-1-1.out"
    ).read_text() == "pilot: starting?]0;title? 1 startd\n"
    again = gather(str(root), None)  # stop again: the same files, afresh
    assert again.jobs == 3 and (logs / "jobs" / "9.1.log").read_text() == held


def test_huge_logs_give_bounded_excerpts_and_the_budget_takes_held_jobs_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_export(tmp_path / "calib")
    noise = "".join(f"{T} (9.1) (40): line {i} {'x' * 200}\n" for i in range(20_000))
    (root / "pool" / "local" / "log" / "ShadowLog").write_text(SHADOW_LOG + noise + "the end\n")
    (root / "pilots" / "out" / "lj-calib-1-1.out").write_text("y" * 10_000_000 + "\n")
    answer = gather(str(root), None)
    logs = root / gather_logs.LOGS_DIR
    held = (logs / "jobs" / "9.1.log").read_text()
    assert len(held.encode()) <= FILE_MAX
    assert "going into Hold state" in held and "line 19999" in held
    assert "lines cut ...]" in held
    assert (logs / "pilots" / "lj-calib-1-1.out").stat().st_size <= FILE_MAX
    assert answer.bytes <= gather_logs.TOTAL_MAX
    monkeypatch.setattr(gather_logs, "TOTAL_MAX", len(held.encode()))
    answer = gather(str(root), None)
    assert (answer.jobs, answer.left_out, answer.pilot_files) == (1, 2, 0)
    assert os.listdir(logs / "jobs") == ["9.1.log"]


def test_a_joined_export_gathers_only_its_own_schedds_logs(tmp_path: Path) -> None:
    root = make_export(tmp_path / "calib")
    answer = gather(str(root), site_bundle.launch_plan(lease="/site/lease-x"))
    assert answer.pilot_files == 0
    held = (root / gather_logs.LOGS_DIR / "jobs" / "9.1.log").read_text()
    assert "== ShadowLog ==" in held and "== StartLog ==" not in held


# ---- at home ------------------------------------------------------------------------------


def test_home_reads_only_plain_files_within_the_cap(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.write_bytes(b"ok\tline\n\x1b[2Jcleared\r\x00\xff\n")
    assert site_logs.read(good) == "ok\tline\n?[2Jcleared??\ufffd\n"
    big = tmp_path / "big"
    big.write_bytes(b"z" * (FILE_MAX + 1))
    link = tmp_path / "link"
    link.symlink_to(good)
    hard = tmp_path / "hard"
    os.link(good, hard)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (big, link, hard, fifo, tmp_path / "missing"):
        assert site_logs.read(path) is None, path


def test_job_ids_are_checked_against_the_export() -> None:
    assert site_logs.check_job("9.1", ["9.0", "9.1"], "calib") == "9.1"
    for bad in ("../9.1", "9", "9.1; rm", "9.1\n", "x" * 100):
        with pytest.raises(BadInput, match="is not a job id"):
            site_logs.check_job(bad, ["9.1"], "calib")
    with pytest.raises(BadInput, match="job 9.7 is not in export 'calib'"):
        site_logs.check_job("9.7", ["9.0", "9.1"], "calib")


# ---- the command ----------------------------------------------------------------------------


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setenv("LUMBERJACK_STATE_DIR", str(tmp_path / "state"))
    ledger = Ledger()
    ledger.create("calib", site="testbed", bundle_dir=Path("/b"), remote_spool="/s",
                  owner="alice", clusters=[9], jobs=["9.0", "9.1", "9.2"])  # fmt: skip
    return ledger


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_an_offline_bundle_has_no_site_logs(ledger: Ledger) -> None:
    ledger.create("offline", site=None, bundle_dir=Path("/b"), remote_spool="/s",
                  owner="alice", clusters=[8], jobs=["8.0"])  # fmt: skip
    result = invoke("logs", "offline")
    assert result.exit_code == 0 and "'offline' is an offline bundle" in result.stdout


def test_logs_command_shows_pilots_jobs_and_one_job(ledger: Ledger, tmp_path: Path) -> None:
    result = invoke("logs", "calib")
    assert result.exit_code == 0 and "no site logs of 'calib' yet" in result.stdout
    root = make_export(tmp_path / "site" / "calib")
    gather(str(root), None)
    home = site_logs.local_dir(ledger.work_dir("calib"))
    (root / gather_logs.LOGS_DIR).rename(home)
    (home / "jobs" / "77.0.log").write_text("job 77.0: not ours\n")
    result = invoke("logs", "calib")
    assert result.exit_code == 0, result.output
    assert "== pilot output lj-calib-1-1.out ==" in result.stdout
    assert "job 9.1: held at the site" in result.stdout and "77.0" not in result.stdout
    answer = json.loads(invoke("logs", "calib", "--json").stdout)
    assert list(answer["jobs"]) == ["9.0", "9.1", "9.2"] and answer["fetched"]
    one = invoke("logs", "calib", "--job", "9.1")
    assert one.exit_code == 0 and "Putting job 9.1 on hold" in one.stdout
    answer = json.loads(invoke("logs", "calib", "--job", "9.1", "--json").stdout)
    assert answer["job"] == "9.1" and "== StarterLog ==" in answer["log"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["logs", "nosuch"], "no export named 'nosuch'"),
        (["logs", "calib", "--job", "../../etc/passwd"], "is not a job id"),
        (["logs", "calib", "--job", "8.0"], "job 8.0 is not in export 'calib'"),
    ],
)
def test_logs_command_bad_input_exits_2(ledger: Ledger, args: list[str], message: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2 and message in result.stderr and result.stdout == ""
    answer = json.loads(invoke(*args, "--json").stdout)
    assert answer["ok"] is False and message in answer["error"]
