"""`export` run as root reads the submitter's inputs as the submitter: an input that is a
link to a root-only file (or a directory holding one) is refused with one line and no job
leaves the local queue; a link to a file the submitter may read is followed; the bundle
is the submitter's alone."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import testbed
from journey import lumberjack, make_job_dir, query, submit

pytestmark = pytest.mark.integration


def exported_state(cluster: int) -> list[tuple]:
    ads = query(f"ClusterId == {cluster}", ["ProcId", "JobStatus", "Managed"])
    return sorted((a["ProcId"], a["JobStatus"], a.get("Managed")) for a in ads)


@pytest.mark.parametrize("how", ["file link", "link inside a directory"])
def test_a_link_to_a_root_only_file_is_refused(workspace: Path, state_dir: Path, how: str) -> None:
    secret = testbed.testbed_dir() / "work" / f"root-only-{os.getpid()}"
    secret.write_text("root's secret\n")
    secret.chmod(0o600)
    try:
        job_dir = make_job_dir(workspace)
        if how == "file link":
            (job_dir / "sub" / "data.txt").unlink()
            (job_dir / "sub" / "data.txt").symlink_to(secret)
            cluster = submit(job_dir, 2)
        else:
            (job_dir / "sub" / "sneaky").symlink_to(secret)
            cluster = submit(job_dir, 2, transfer_input_files="in put.txt, sub/")
        before = exported_state(cluster)
        result = lumberjack(
            "export", "--ids", str(cluster), "--out", str(workspace / "bundle"),
            "--remote-spool", "/site/spool", check=False,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: input file "), lines
        assert "is not readable: Permission denied" in lines[0]
        assert exported_state(cluster) == before and all(m is None for *_, m in before)
        assert json.loads(lumberjack("exports", "--json").stdout)["exports"] == []
        assert not (workspace / "bundle").exists()
    finally:
        secret.unlink()


def test_a_link_the_submitter_may_follow_works_and_the_bundle_is_theirs(
    workspace: Path, state_dir: Path
) -> None:
    job_dir = make_job_dir(workspace)
    shared = workspace / "shared.txt"
    shared.write_text("readable by the submitter\n")
    os.chown(shared, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    (job_dir / "sub" / "data.txt").unlink()
    (job_dir / "sub" / "data.txt").symlink_to(shared)
    cluster = submit(job_dir, 1)
    out = workspace / "bundle"
    lumberjack("export", "--ids", str(cluster), "--out", str(out), "--remote-spool", "/site/spool")
    try:
        copied = list((out / "spool" / "lumberjack-inputs").rglob("data.txt"))
        assert [p.read_text() for p in copied] == ["readable by the submitter\n"]
        for path in (out, *out.rglob("*")):
            info = path.lstat()
            assert info.st_uid == testbed.SUBMITTER_UID, path
            assert not stat.S_IMODE(info.st_mode) & 0o077, (path, oct(info.st_mode))
        assert stat.S_IMODE(out.stat().st_mode) == 0o700
        assert stat.S_IMODE((state_dir / "ledger.sqlite").stat().st_mode) == 0o600
    finally:
        lumberjack(
            "unexport", json.loads(lumberjack("exports", "--json").stdout)["exports"][0]["name"]
        )
