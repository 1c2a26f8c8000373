"""The log format on logs the real schedd wrote, and an export that fails after the
schedd let go of the jobs: they must come back to the local schedd, unexported."""

from __future__ import annotations

from pathlib import Path

import pytest
import testbed
from journey import make_job_dir, query, submit

from lumberjack.ap import export as export_mod
from lumberjack.ap.bundle_home import make_bundle_dir
from lumberjack.ap.schedd import LocalSchedd
from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw
from lumberjack.errors import BadInput
from lumberjack.state.exporting import run_export
from lumberjack.state.ledger import Ledger

pytestmark = pytest.mark.integration


def test_schedd_written_logs_round_trip(workspace: Path, state_dir: Path) -> None:
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 3)
    native = workspace / "native"
    make_bundle_dir(native, testbed.SUBMITTER)
    LocalSchedd().export_jobs([cluster], native, "/site/spool")
    try:
        for path in (native / "job_queue.log", testbed.ACCESS_POINT.spool_dir / "job_queue.log"):
            text = path.read_text(errors="surrogateescape")
            assert jqlw.format_records(jql.parse_records(text)) == text
            ads = jql.read_log(path)
            assert any(jql.key_kind(k) == "proc" for k in ads)
        ads = jql.read_log(native / "job_queue.log")
        assert ads[jql.cluster_key(cluster)].get("Iwd") == f'"{job_dir}"'
        assert {k for k in ads if jql.key_kind(k) == "proc"} == {f"{cluster}.{p}" for p in range(3)}
    finally:
        LocalSchedd().unexport([cluster])


def test_failure_after_the_schedd_let_go_rolls_back(workspace: Path, state_dir: Path) -> None:
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 2)
    schedd = LocalSchedd()
    plan, _ = export_mod.plan_export(
        schedd,
        export_mod.Selection(ids=(str(cluster),)),
        name="vanishing-input",
        bundle_dir=workspace / "bundle",
        remote_spool="/site/spool",
    )
    # The input disappears between the checks and the copy: the bundle cannot be written.
    (job_dir / "sub" / "data.txt").unlink()
    ledger = Ledger()
    with pytest.raises(BadInput):
        run_export(schedd, ledger, plan, site=None)
    ads = query(f"ClusterId == {cluster}", ["ProcId", "Managed", "JobStatus"])
    assert len(ads) == 2 and all(a.get("Managed") is None and a["JobStatus"] == 1 for a in ads)
    assert ledger.get("vanishing-input").phase == "failed"
