"""Paths the ClassAd syntaxes disagree on: a backslash, a quote, a space, non-ASCII text.

job_queue.log holds values in the OLD ClassAd syntax (a backslash is an ordinary
character); the bindings print the NEW one (a backslash is doubled, non-ASCII becomes
octal escapes). A path planned from one and shipped under the other is a different path:
these jobs prove the plan, the bundle and the outputs agree, on real daemons."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import testbed
from journey import chown_tree, fetch_back, history, lumberjack, run_in_second_pool, submit, tree

pytestmark = pytest.mark.integration

ODD_DIR = 'dir \\ with "quote" and névé'
ODD_INPUT = "in\\put ñ.txt"


def test_backslash_quote_space_and_non_ascii_survive_the_round_trip(
    workspace: Path, state_dir: Path
) -> None:
    job_dir = workspace / ODD_DIR
    job_dir.mkdir()
    (job_dir / "results").mkdir()
    script = job_dir / "run.sh"
    script.write_text('#!/bin/sh\ncat ./*.txt > result.txt\necho "odd $1"\n')
    script.chmod(0o755)
    (job_dir / ODD_INPUT).write_text("odd input\n")
    chown_tree(job_dir)
    cluster = submit(job_dir, 2, transfer_input_files=ODD_INPUT)
    bundle = workspace / "odd-bundle"
    spool = workspace / "odd-spool"
    out = lumberjack(
        "export", "--ids", str(cluster), "--out", str(bundle), "--remote-spool", str(spool),
        "--name", "odd", "--json",
    )  # fmt: skip
    assert json.loads(out.stdout)["jobs"] == [f"{cluster}.0", f"{cluster}.1"]

    # The path planned in the manifest is the path shipped in the bundle, byte for byte.
    manifest = json.loads((bundle / "manifest.json").read_text())
    shipped = {entry["path"] for entry in manifest["files"]}
    assert f"lumberjack-inputs{job_dir}/{ODD_INPUT}" in shipped
    assert f"lumberjack-inputs{job_dir}/run.sh" in shipped
    for path in shipped:
        assert (bundle / "spool" / path).is_file()

    run_in_second_pool(bundle, spool, expect_jobs=2)
    fetch_back(spool, bundle)
    imported = json.loads(lumberjack("import", "--in", str(bundle), "--json").stdout)
    assert imported["completed"] == 2

    ads = history(cluster, ["ProcId", "JobStatus", "Iwd", "TransferInput"], expect=2)
    assert {(a["JobStatus"], a["Iwd"], a["TransferInput"]) for a in ads} == {
        (4, str(job_dir), ODD_INPUT)
    }
    after = tree(job_dir)
    assert after["result.txt"] == b"odd input\n"
    assert {after[f"out.{p}"] for p in range(2)} == {b"odd 0\n", b"odd 1\n"}
    assert os.stat(job_dir / "result.txt").st_uid == testbed.SUBMITTER_UID
