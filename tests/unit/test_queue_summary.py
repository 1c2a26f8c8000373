"""The queue summary `inspect` prints (ap/queue_summary.py): what a person sees of a
job_queue.log, and that it stays on the access point."""

from __future__ import annotations

import io
import zipfile

from test_jobqueuelog import FIXTURE

from lumberjack.ap import agent_zipapp
from lumberjack.ap.queue_summary import queue_summary
from lumberjack.core import jobqueuelog as jql
from lumberjack.core.jobqueuelog import Ad


def test_queue_summary_of_fixture() -> None:
    summary = queue_summary(jql.replay(jql.parse_records(FIXTURE)))
    assert summary["num_clusters"] == 1 and summary["num_procs"] == 2
    assert summary["num_other_ads"] == 3  # header, user record, cluster-private ad
    assert summary["status_counts"] == {"Held": 1, "Running": 1}
    (cluster,) = summary["clusters"]
    assert cluster["cluster"] == 1 and cluster["key"] == "01.-1" and cluster["num_procs"] == 2
    assert cluster["owner"] == "alice" and cluster["cmd"] == "/bin/echo"
    assert cluster["qdate"] == 1718000100
    p0, p1 = cluster["procs"]
    assert p0["id"] == "1.0" and p0["status"] == "Held" and p0["job_status"] == 5
    assert p0["iwd"] == "/home/alice/first dir"  # its own (lower-case) iwd wins
    # old ClassAd syntax, as the schedd reads job_queue.log: only \" is an escape
    assert p0["args"] == 'a "quoted" \\\\ back'
    assert p0["owner"] == "alice" and p0["cmd"] == "/bin/echo"  # from the cluster ad
    assert p1["iwd"] == "/home/alice/moved dir" and p1["status"] == "Running"
    assert p1["args"] is None and p1["exit_code"] is None


def test_queue_summary_statuses_managed_and_arguments() -> None:
    ads = {
        "01.-1": Ad("01.-1", "Job", "Machine", {"Owner": '"bob"', "Arguments": "\"'x y'\""}),
        "1.0": Ad("1.0", "Job", "Machine", {"JobStatus": "4", "ExitCode": "3"}),
        "1.1": Ad("1.1", "Job", "Machine", {"JobStatus": "6", "Args": '"old"'}),
        "1.2": Ad(
            "1.2",
            "Job",
            "Machine",
            {"JobStatus": "2", "Managed": '"External"', "ManagedManager": '"lumberjack"'},
        ),
        "1.3": Ad("1.3", "Job", "Machine", {"JobStatus": "42"}),
        "1.4": Ad("1.4", "Job", "Machine", {"JobStatus": "Held ? 1 : 2"}),
        "3.0": Ad("3.0", "Job", "Machine", {"JobStatus": "7", "Cmd": '"/bin/sh"'}),
        "04.-1": Ad("04.-1", "Job", "Machine", {"Cmd": '"x" + "y"', "Iwd": '"C:\\dir\\"'}),
    }
    summary = queue_summary(ads)
    assert [c["cluster"] for c in summary["clusters"]] == [1, 3, 4]
    procs = {p["id"]: p for c in summary["clusters"] for p in c["procs"]}
    assert procs["1.0"]["status"] == "Completed" and procs["1.0"]["exit_code"] == 3
    assert procs["1.0"]["args"] == "'x y'"
    # the proc's own Args does not hide the cluster's Arguments (Arguments wins)
    assert procs["1.1"]["status"] == "Transferring Output"
    assert procs["1.2"]["managed"] == "External"
    assert procs["1.2"]["managed_manager"] == "lumberjack"
    assert procs["1.3"]["status"] == "Unknown (42)"
    assert procs["1.4"]["status"] == "Held ? 1 : 2"
    assert procs["3.0"]["status"] == "Suspended" and procs["3.0"]["owner"] is None
    assert summary["clusters"][1]["key"] is None  # cluster 3 has no cluster ad
    assert summary["clusters"][2]["num_procs"] == 0
    assert summary["clusters"][2]["cmd"] == '"x" + "y"'  # an expression stays text
    assert summary["clusters"][2]["iwd"] == "C:\\dir\\"  # a backslash before the end quote


def test_the_summary_is_not_shipped_to_the_site() -> None:
    """Only inspect prints it: the agent's zipapp holds the log's reader and writer, not
    the summary (nor anything else of the access point's side)."""
    with zipfile.ZipFile(io.BytesIO(agent_zipapp.build_agent())) as archive:
        names = archive.namelist()
        shipped = [n for n in names if n.startswith("lumberjack/")]
        code = b"".join(archive.read(n) for n in shipped if n.endswith(".py"))
    assert "lumberjack/core/jobqueuelog.py" in shipped
    assert not [n for n in shipped if n.startswith("lumberjack/ap/")]
    assert b"def queue_summary" not in code
