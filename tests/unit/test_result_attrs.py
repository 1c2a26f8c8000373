"""The table of results a site may send back: types and ranges hold against hostile
values, and a job's ad takes its usage, its hold, and nothing that changes the job."""

from __future__ import annotations

import pytest

from lumberjack.ap import result_attrs, results
from lumberjack.ap.result_attrs import checked
from lumberjack.cli.import_cmd import _import_text
from lumberjack.core import jobqueuelog as jql

# ---- the table ----------------------------------------------------------------------


def test_nothing_that_changes_what_the_job_does_is_a_result() -> None:
    never = (
        "Cmd Args Arguments Environment Env Requirements Rank Iwd In Out Err UserLog "
        "TransferInput TransferOutput TransferOutputRemaps TransferExecutable PreCmd PostCmd "
        "PeriodicHold PeriodicRelease PeriodicRemove OnExitHold OnExitRemove JobUniverse "
        "Owner User AccountingGroup x509userproxy RequestMemory RequestCpus RequestDisk "
        "JobLeaseDuration ContainerImage SingularityImage RemoteHost"
    )
    for name in never.split():
        assert result_attrs.kind_of(name) is None, name
        assert result_attrs.kind_of(name.upper()) is None, name


def test_usage_the_accounting_needs_is_in_the_table() -> None:
    usage = (
        "MemoryUsage DiskUsage ResidentSetSize ImageSize RemoteUserCpu RemoteSysCpu "
        "RemoteWallClockTime CumulativeSlotTime CommittedTime ActivationDuration "
        "ActivationExecutionDuration ActivationSetupDuration ActivationTeardownDuration "
        "BlockReads BlockWrites BlockReadKbytes BlockWriteKbytes TransferInputSizeMB "
        "BytesSent BytesRecvd TransferInQueued NumJobStarts JobCurrentStartDate"
    )
    for name in usage.split():
        assert result_attrs.kind_of(name) is not None, name


def test_site_internal_names_are_not_results() -> None:
    for name in ("MachineAttrCpus0", "RecentBlockReads", "RemoteHost", "SpooledOutputFiles"):
        assert result_attrs.is_site_internal(name)
        assert result_attrs.kind_of(name) is None
    assert not set(map(str.lower, result_attrs.RESULTS)) & result_attrs.SITE_INTERNAL


# ---- values -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "stored"),
    [
        ("MemoryUsage", "5", "5"),
        ("ResidentSetSize", " 4750 ", "4750"),
        ("RemoteWallClockTime", "3.000000", "3.000000"),
        ("RemoteUserCpu", "0.0", "0.0"),
        ("RemoteSysCpu", "7", "7"),
        ("ExitCode", "3", "3"),
        ("ExitBySignal", "FALSE", "false"),
        ("JobCurrentFinishTransferOutputDate", "-1", "-1"),
        ("HoldReasonSubCode", "-13", "-13"),
        ("HoldReason", '"via \\"condor_hold\\""', '"via \\"condor_hold\\""'),
        ("LastRemoteHost", '"slot1_1@pilot-1-c1@hpc-login"', '"slot1_1@pilot-1-c1@hpc-login"'),
        ("TransferInputStats", "[ CedarFilesCount = 3; CedarSizeBytes = 2352.0; ]",
         "[ CedarFilesCount = 3; CedarSizeBytes = 2352.0 ]"),
        ("TransferOutputStats", "[  ]", "[ ]"),
        ("NumHoldsByReason", "[ JobPolicy = 1 ]", "[ JobPolicy = 1 ]"),
    ],
)  # fmt: skip
def test_good_values_are_stored(name: str, text: str, stored: str) -> None:
    assert checked(name, text) == stored


@pytest.mark.parametrize(
    ("name", "text"),
    [
        # expressions, however harmless they look
        ("MemoryUsage", "((ResidentSetSize + 1023) / 1024)"),
        ("ExitCode", "Cmd"),
        ("ExitCode", "1 + 2"),
        ("RemoteWallClockTime", "time()"),
        ("ExitBySignal", "ExitCode == 0"),
        ("HoldReason", 'strcat("a", Cmd)'),
        ("HoldReason", '"a" "b"'),
        ("TransferInputStats", "[ CedarFilesCount = Cmd ]"),
        ("TransferInputStats", '[ Evil = "x" ]'),
        ("TransferInputStats", "[ A = 1 ] [ B = 2 ]"),
        # wrong types
        ("ExitCode", '"0"'),
        ("ExitCode", "0.5"),
        ("ExitBySignal", "1"),
        ("HoldReason", "42"),
        ("LastRemoteHost", "undefinedx"),
        ("JobStatus", "true"),
        # negative, huge, not finite
        ("ResidentSetSize", "-1"),
        ("RemoteWallClockTime", "-0.5"),
        ("BlockReads", str(2**60)),
        ("RemoteUserCpu", "1e300"),
        ("RemoteUserCpu", "inf"),
        ("RemoteUserCpu", "nan"),
        ("ExitCode", "256"),
        ("JobStatus", "9"),
        ("JobStatus", "0x4"),
        ("CompletionDate", "99999999999999"),
        ("NumJobStarts", "9" * 40),
        ("TransferInputStats", "[ " + "; ".join(f"F{i} = 1" for i in range(100)) + " ]"),
        ("TransferInputStats", "[ Bytes = -5 ]"),
        # strings with control characters or too long
        ("HoldReason", '"line one\tand a tab"'),
        ("HoldReason", '"bell \x07 and escape \x1b[31m"'),
        ("HoldReason", '"delete \x7f"'),
        ("HoldReason", '"' + "x" * 5000 + '"'),
        ("LastRemoteHost", '"' + "h" * 300 + '"'),
        ("LastRemoteHost", '"unterminated'),
        # names that are no result
        ("Cmd", '"/bin/true"'),
        ("Requirements", "true"),
    ],
)
def test_hostile_values_are_refused(name: str, text: str) -> None:
    assert checked(name, text) is None


# ---- a job's ad ---------------------------------------------------------------------------


def ad(**attrs: str) -> jql.Ad:
    return jql.Ad("7.0", "Job", "Machine", dict(attrs))


def test_finished_job_takes_its_usage_as_checked_literals() -> None:
    original = ad(Cmd='"/home/a/run.sh"', JobStatus="1", MemoryUsage="undefined")
    sent = ad(Cmd='"/site/run.sh"', JobStatus="1")
    back = ad(
        Cmd='"/site/run.sh"', JobStatus="4", ExitCode="0", ResidentSetSize="4750",
        MemoryUsage="((ResidentSetSize + 1023) / 1024)", RemoteWallClockTime="3.000000",
        ActivationDuration="3", ActivationExecutionDuration="2", BlockReads="0",
        MachineAttrCpus0="1", RecentBlockReads="0", RemoteHost='"slot1_1@c1"',
        Requirements="true", DiskUsage="-5", TransferInputStats="[ CedarFilesCount = 3 ]",
    )  # fmt: skip
    new, changes = results.take_results(original, sent, back, "testbed")
    assert new.get("JobStatus") == "4" and new.get("ExitCode") == "0"
    assert new.get("MemoryUsage") == "5"  # HTCondor's expression, computed: 4750 KiB -> 5 MB
    assert new.get("RemoteWallClockTime") == "3.000000"
    assert new.get("ActivationExecutionDuration") == "2"
    assert new.get("TransferInputStats") == "[ CedarFilesCount = 3 ]"
    assert new.get("Cmd") == '"/home/a/run.sh"'
    for dropped in ("MachineAttrCpus0", "RecentBlockReads", "RemoteHost", "Requirements"):
        assert new.get(dropped) is None
    assert new.get("DiskUsage") is None
    # Only what matters is reported: a change to what the job does, a refused value.
    assert changes.to_json() == {
        "changed": [], "added": ["Requirements"], "removed": [], "refused": ["DiskUsage"],
    }  # fmt: skip


def test_any_other_memory_usage_expression_is_refused() -> None:
    back = ad(JobStatus="4", ResidentSetSize="4750", MemoryUsage="ResidentSetSize * 1000")
    new, changes = results.take_results(ad(), ad(), back, "testbed")
    assert new.get("MemoryUsage") is None and changes.refused == ["MemoryUsage"]


def test_job_held_at_the_site_comes_back_held_with_the_site_named() -> None:
    back = ad(
        JobStatus="5", HoldReasonCode="3", HoldReasonSubCode="0", NumHolds="1",
        HoldReason="\"The job attribute OnExitHold expression 'ExitCode == 4' evaluated to TRUE\"",
    )  # fmt: skip
    new, _ = results.take_results(ad(JobStatus="1"), ad(JobStatus="1"), back, "perlmutter")
    assert new.get("JobStatus") == "5" and new.get("HoldReasonCode") == "3"
    assert new.get("NumHolds") is None  # the local schedd counts the hold it is handed
    assert new.get("HoldReason") == (
        "\"at site perlmutter: The job attribute OnExitHold expression 'ExitCode == 4' "
        'evaluated to TRUE"'
    )


def test_held_job_with_a_hostile_reason_still_comes_back_held() -> None:
    back = ad(JobStatus="5", HoldReason='"\x1b[2J gone"', HoldReasonCode="99999")
    new, changes = results.take_results(ad(JobStatus="1"), ad(JobStatus="1"), back, "s")
    assert new.get("JobStatus") == "5"
    assert new.get("HoldReason") == '"at site s: held (no reason returned)"'
    assert new.get("HoldReasonCode") is None
    assert sorted(changes.refused) == ["HoldReason", "HoldReasonCode"]


def test_idle_job_keeps_usage_but_not_its_exit() -> None:
    back = ad(JobStatus="2", RemoteWallClockTime="10.0", ExitCode="1", NumJobStarts="1")
    new, _ = results.take_results(ad(JobStatus="1"), ad(JobStatus="1"), back)
    assert new.get("JobStatus") == "1" and new.get("ExitCode") is None
    assert new.get("RemoteWallClockTime") == "10.0" and new.get("NumJobStarts") == "1"


# ---- the import report ------------------------------------------------------------------


def report(jobs: int) -> dict:
    changes = {f"7.{p}": {"changed": [], "added": ["Foo", "Bar"], "removed": [],
                          "refused": ["DiskUsage"]} for p in range(jobs)}  # fmt: skip
    return {"name": "calib", "jobs": jobs, "completed": jobs, "handed_back_idle": 0,
            "placements": [], "files_placed": 0, "site_changes": changes,
            "held_at_site": ["7.3"]}  # fmt: skip


def test_import_report_gives_one_summary_line_for_ten_thousand_jobs() -> None:
    text = _import_text(report(10_000), dry_run=False, again=False)
    lines = text.splitlines()
    assert len(lines) == 3, text
    assert "1 job held at the site, held here too: 7.3" in lines[1]
    assert "logs calib --job ID" in lines[1]
    assert lines[2] == (
        "site changed 3 attributes in 10000 ads, not merged: Bar (10000), DiskUsage (10000), "
        "Foo (10000) (--verbose: each ad)"
    )


def test_import_report_verbose_names_each_ad() -> None:
    lines = _import_text(report(3), dry_run=False, again=False, verbose=True).splitlines()
    assert lines[2:] == [f"7.{p}: site changed, not merged: Foo, Bar, DiskUsage" for p in range(3)]
