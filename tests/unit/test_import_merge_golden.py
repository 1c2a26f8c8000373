"""The queue import hands the schedd, byte for byte: a sample of what sites send back
(results, holds, refused values, the site's own changes, odd spellings, ads never sent,
jobs gone) planned and merged, against golden files written by the merge as it was
before it was made faster. Any change to what is merged or reported shows here.

Regenerate (only for a change meant to alter the output, said in its commit):
LUMBERJACK_WRITE_GOLDEN=1 pytest tests/unit/test_import_merge_golden.py
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

from lumberjack.ap import importer
from lumberjack.ap.export import Plan, write_bundle
from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw

GOLDEN = Path(__file__).parent / "fixtures" / "import_merge"
SPOOL = "/remote/spool"
OWNER = pwd.getpwuid(os.geteuid()).pw_name
MEMORY = "((ResidentSetSize+1023)/1024)"


def _native(iwd: Path) -> dict[str, jql.Ad]:
    ads = {"0.0": jql.Ad("0.0", "(empty)", "(empty)", {"NextClusterNum": "12"})}
    for cluster, procs in ((7, 8), (9, 2)):
        ckey = jql.cluster_key(cluster)
        ads[ckey] = jql.Ad(ckey, "Job", "Machine", {
            "ClusterId": str(cluster), "Owner": f'"{OWNER}"', "User": f'"{OWNER}@ap"',
            "Cmd": json.dumps(f"{iwd}/run.sh"), "Iwd": json.dumps(str(iwd)),
            "UserLog": '"job.log"', "Requirements": "true", "MemoryUsage": MEMORY,
            "RemoteWallClockTime": "0.0", "JobLeaseDuration": "2400",
            **({"TransferOutput": '"result.txt"'} if cluster == 9 else {}),
        })  # fmt: skip
        for proc in range(procs):
            key = f"{cluster}.{proc}"
            attrs = {
                "ProcId": str(proc), "JobStatus": "1", "Args": f'"{proc}"',
                "Iwd": json.dumps(f"{SPOOL}/{cluster}/{proc}/cluster{cluster}.proc{proc}.subproc0"),
                "Out": json.dumps(f"out.{proc}"), "Err": json.dumps(f"err.{proc}"),
                "GlobalJobId": f'"ap#{key}#1"',
            }  # fmt: skip
            if key == "7.5":
                attrs["Näme"] = '"local"'
            if key == "7.6":
                attrs["ExitCode"] = "0"
            ads[key] = jql.Ad(key, "Job", "Machine", attrs)
    return ads


#: What the site sends back, per ad: attributes set (name -> value), None to delete.
RETURNED: dict[str, dict[str, str | None]] = {
    "7.0": {
        "JobStatus": "4", "ExitCode": "0", "ExitBySignal": "false", "RemoteWallClockTime": "12.0",
        "CompletionDate": "1718000060", "EnteredCurrentStatus": "1718000060",
        "MemoryUsage": MEMORY, "ResidentSetSize": "20480", "ImageSize": " 2500 ",
        "RemoteHost": '"slot1@node7"', "MachineAttrCpus0": "8", "RecentBlockReads": "3",
        "SiteNote": '"from the site"', "Cmd": '"/bin/evil"', "LastRemoteHost": '"slot1@node7"',
        "TransferInputStats": "[ CedarFilesCount = 3; CedarSizeBytes = 2352 ]",
    },
    "7.1": {
        "JobStatus": "2", "NumJobStarts": "1", "ExitCode": "3", "RemoteUserCpu": "5.5",
        "JobCurrentStartDate": "1718000000", "NumShadowStarts": "1",
    },
    "7.2": {
        "JobStatus": "5", "HoldReason": '"out of disk"', "HoldReasonCode": "13",
        "HoldReasonSubCode": "28", "NumHolds": "2",
        "NumHoldsByReason": "[ JobOutOfResources = 2 ]", "NumJobStarts": "2",
    },
    "7.3": {
        "JobStatus": "4", "ExitCode": "1 + 1", "CompletionDate": "99999999999999",
        "HoldReason": '"bad\\x01text"', "TransferInputStats": "[ A = foo ]",
        "MemoryUsage": "ResidentSetSize * 2", "BytesSent": "1e400", "BytesRecvd": "-1",
        "ExitBySignal": "maybe", "RemoteSysCpu": "0.25", "LastJobStatus": "2",
    },
    "7.5": {
        "jobstatus": "3", "exitcode": "0", "remotewallclocktime": "3.0", "NÄME": '"site"',
        "EnteredCurrentStatus": "1718000099",
    },
    "7.6": {"JobStatus": "4", "ExitCode": "undefined", "Out": None, "CpusUsage": "UNDEFINED"},
    "7.7": {"JobStatus": "4", "Args": '"7"', "ExitCode": "0", "Requirements": "false"},
    "9.0": {"JobStatus": "4", "ExitCode": "0", "BlockReads": "12", "DiskUsage": "-4"},
    "9.1": {"JobStatus": "4", "ExitCode": "255", "ExitSignal": "129", "ExitStatus": "65535"},
    "09.-1": {
        "Requirements": "false", "SiteOnly": "1", "Owner": '"site"', "JobLeaseDuration": None,
    },
    "0.0": {"NextClusterNum": "40"},
}  # fmt: skip


def build(tmp: Path) -> tuple[Path, Path]:
    """The sample bundle and the spool the site returned for it."""
    iwd = tmp / "home" / "calib"
    iwd.mkdir(parents=True)
    (iwd / "run.sh").write_text("#!/bin/sh\n")
    bundle = tmp / "bundle"
    (bundle / "native").mkdir(parents=True)
    native = _native(iwd)
    jqlw.write_log(bundle / "native" / "job_queue.log", native, timestamp=1718000000)
    jobs = [k for k in native if jql.key_kind(k) == "proc"]
    plan = Plan("golden", OWNER, [7, 9], jobs, bundle, SPOOL, 1, 10)
    write_bundle(plan, bundle / "native" / "job_queue.log", dict.fromkeys(jobs, str(iwd)),
                 site="testsite")  # fmt: skip
    queue = jql.read_log(bundle / "spool" / "job_queue.log")
    del queue["7.4"]  # removed at the site
    for key, ad in (("7.8", queue["7.7"]), ("11.0", queue["7.7"]), ("0.1", queue["0.0"])):
        queue[key] = jql.Ad(key, ad.my_type, ad.target_type, dict(ad.attrs))  # never sent
    for key, changes in RETURNED.items():
        for name, value in changes.items():
            if value is None:
                queue[key].delete(name)
            else:
                queue[key].set(name, value)
    returned = bundle / "returned"
    returned.mkdir()
    jqlw.write_log(returned / "job_queue.log", queue, timestamp=1718000100)
    for proc in (0, 1):
        job_dir = returned / "7" / str(proc) / f"cluster7.proc{proc}.subproc0"
        job_dir.mkdir(parents=True)
        (job_dir / "_condor_stdout").write_text(f"out {proc}\n")
    return bundle, returned


def merged(tmp: Path) -> tuple[str, str]:
    """(the merge log's text, the merge and the report as JSON), the sample's paths
    written as <TMP>."""
    bundle, returned = build(tmp)
    _manifest, merge, _plans = importer.plan_import(bundle, returned, site="testsite")
    log = jqlw.log_text(merge.ads, timestamp=1718000200)
    report = importer.run_import(
        None, bundle, returned, work_dir=tmp, dry_run=True, site="testsite"
    ).to_json()
    summary = {
        "completed": merge.completed,
        "idle": merge.idle,
        "statuses": {k: None if s is None else s.name for k, s in merge.statuses.items()},
        "site_changes": merge.site_changes,
        "not_sent": merge.not_sent,
        "missing": merge.missing,
        "report": report,
    }
    text = json.dumps(summary, indent=1, ensure_ascii=False) + "\n"
    return log.replace(str(tmp), "<TMP>"), text.replace(str(tmp), "<TMP>")


def test_the_merge_log_and_report_are_the_golden_ones(tmp_path: Path) -> None:
    log, report = merged(tmp_path)
    assert "<TMP>" in log and "at site testsite: out of disk" in log  # the sample is whole
    if os.environ.get("LUMBERJACK_WRITE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        (GOLDEN / "merge.log").write_bytes(log.encode("utf-8", "surrogateescape"))
        (GOLDEN / "report.json").write_text(report, encoding="utf-8")
    assert log.encode("utf-8", "surrogateescape") == (GOLDEN / "merge.log").read_bytes()
    assert report == (GOLDEN / "report.json").read_text(encoding="utf-8")
