"""DAGMan's nodes log takes only the events DAGMan asked for (DAGManNodesMask), as the
schedd writes it: the mask is read at export, kept in the path map, and import writes
the job's other events to its own user log only. And the conformance suite's reading
of what DAGMan wrote (tests/integration/conformance_dag.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from test_pathmap import SPOOL, proc_ad, q, submit

from lumberjack.ap.job_paths import JobPaths
from lumberjack.ap.pathmap import rewrite_job
from lumberjack.ap.userlog import masked

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from conformance_dag import dag_differences, node_status, rescue_done  # noqa: E402

#: What condor_dagman 25.x puts in each node job's DAGManNodesMask.
MASK = "0,1,2,4,5,7,8,9,10,11,12,13,16,17,24,27,35,36"
EVENTS = (
    b"000 (001.000.000) 2026-11-28 02:12:32 Job submitted from host: <h>\n...\n"
    b"040 (001.000.000) 2026-11-28 02:12:33 Started transferring input files\n"
    b"\tTransferring to host: <h>\n...\n"
    b"001 (001.000.000) 2026-11-28 02:12:33 Job executing on host: <h>\n...\n"
    b"005 (001.000.000) 2026-11-28 02:12:34 Job terminated.\n\t(1) Normal termination "
    b"(return value 3)\n...\n"
)


def test_the_mask_is_read_at_export_and_kept_in_the_path_map() -> None:
    cluster = submit(DAGManNodesLog=q("/home/alice/dag/x.nodes.log"), DAGManNodesMask=q(MASK))
    paths = rewrite_job(3, 0, cluster, proc_ad(), SPOOL).paths
    assert paths.dagman_nodes_mask == [int(n) for n in MASK.split(",")]
    again = JobPaths.from_json(paths.to_json())
    assert again.dagman_nodes_mask == paths.dagman_nodes_mask


def test_no_mask_or_a_mask_that_is_not_numbers_leaves_every_event() -> None:
    log = q("/home/alice/dag/x.nodes.log")
    assert rewrite_job(3, 0, submit(DAGManNodesLog=log), proc_ad(), SPOOL).paths \
        .dagman_nodes_mask is None  # fmt: skip
    odd = submit(DAGManNodesLog=log, DAGManNodesMask=q("0,one,5"))
    assert rewrite_job(3, 0, odd, proc_ad(), SPOOL).paths.dagman_nodes_mask is None
    # A mask without a nodes log is not kept: nothing would read it.
    assert rewrite_job(3, 0, submit(DAGManNodesMask=q(MASK)), proc_ad(), SPOOL).paths \
        .dagman_nodes_mask is None  # fmt: skip


def test_masked_keeps_the_events_dagman_asked_for_whole_and_in_order() -> None:
    kept = masked(EVENTS, [int(n) for n in MASK.split(",")])
    assert b"Started transferring" not in kept  # 040: not in DAGMan's mask
    assert [line[:3] for line in kept.split(b"\n") if line[:1].isdigit()] == [
        b"000", b"001", b"005"
    ]  # fmt: skip
    assert kept.endswith(b"(return value 3)\n...\n")
    assert masked(EVENTS, None) == EVENTS
    assert masked(EVENTS, []) == b""


def test_the_node_status_file_and_the_rescue_dag_as_compared(tmp_path: Path) -> None:
    status = tmp_path / "nodes.status"
    status.write_text(
        '[ Type = "DagStatus"; DagStatus = 6; ]\n'
        '[ Type = "NodeStatus"; Node = "A"; NodeStatus = 5; StatusDetails = ""; '
        "RetryCount = 1; ]\n"
        '[ Type = "NodeStatus"; Node = "E"; NodeStatus = 6; '
        'StatusDetails = "Job proc (1550.0.0) failed with status 2"; RetryCount = 0; ]\n'
    )
    nodes = node_status(status)
    assert nodes["A"] == {"NodeStatus": 5, "StatusDetails": "", "RetryCount": 1}
    assert nodes["E"]["StatusDetails"] == "Job proc (J) failed with status 2"  # any pool's id
    rescue = tmp_path / "x.dag.rescue001"
    rescue.write_text("# Rescue DAG\nDONE B\nDONE A\n")
    assert rescue_done(rescue) == ["A", "B"]
    assert rescue_done(tmp_path / "none") == []
    assert dag_differences({"A RetryCount": 1}, {"A RetryCount": 0}) == [
        "A RetryCount: reference pool 1, through lumberjack 0"
    ]
