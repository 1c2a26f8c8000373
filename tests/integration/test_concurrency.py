"""Many lumberjacks at once: twenty exports started together, two `sync` at once with a
person's step on the same export. Whatever the interleaving, each job is in exactly one
export, nothing is done twice, and a command that finds the export busy says so and
changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from journey import (
    SITE_BASE,
    expected_outputs,
    history,
    make_job_dir,
    query,
    stop_at_site,
    submit,
    tree,
)

from lumberjack.state.ledger import Ledger

pytestmark = pytest.mark.integration

BUSY_EXIT = 4  # errors.Busy


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "lumberjack", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=600)
    return process.returncode, out, err


def test_twenty_exports_at_once(workspace: Path, state_dir: Path) -> None:
    """Twenty clusters, twenty `export` processes started together (offline bundles),
    then twenty `unexport` together: every job in exactly one export, then back home."""
    job_dir = make_job_dir(workspace)
    clusters = [submit(job_dir, 1) for _ in range(20)]
    out = workspace / "bundles"
    out.mkdir()
    running = [
        start(
            "export",
            "--ids",
            str(c),
            "--out",
            str(out / f"b{c}"),
            "--remote-spool",
            f"/elsewhere/{c}/spool",
            "--name",
            f"many-{c}",
            "--json",
        )  # fmt: skip
        for c in clusters
    ]
    results = [finish(p) for p in running]
    assert [r[0] for r in results] == [0] * 20, [r[2] for r in results if r[0]]
    records = {r.name: r for r in Ledger().list()}
    assert {records[f"many-{c}"].phase for c in clusters} == {"exported"}
    assert sorted(j for c in clusters for j in records[f"many-{c}"].jobs) == sorted(
        f"{c}.0" for c in clusters
    )
    for c in clusters:
        manifest = json.loads((out / f"b{c}" / "manifest.json").read_text())
        assert manifest["jobs"] == [f"{c}.0"]
    managed = query(" || ".join(f"ClusterId == {c}" for c in clusters), ["Managed"])
    assert [a.get("Managed") for a in managed] == ["External"] * 20

    running = [start("unexport", f"many-{c}", "--json") for c in clusters]
    back = [finish(p) for p in running]
    assert [r[0] for r in back] == [0] * 20, [r[2] for r in back if r[0]]
    ads = query(" || ".join(f"ClusterId == {c}" for c in clusters), ["JobStatus", "Managed"])
    assert len(ads) == 20
    assert all(a["JobStatus"] == 1 and a.get("Managed") != "External" for a in ads), ads
    assert {r.phase for r in Ledger().list()} == {"unexported"}


def test_two_syncs_and_a_person_at_once(workspace: Path, state_dir: Path, site) -> None:
    """Cron's `sync` twice at once and a person's `ship` on the same export: each either
    acts or is skipped/refused as busy; one placement, one pilot, every job run once."""
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 2)
    before = tree(job_dir)
    name = "together"
    remote_dir = f"{SITE_BASE}/{name}"
    exported = subprocess.run(
        [sys.executable, "-m", "lumberjack", "export", "--ids", str(cluster), "--site",
         "testbed", "--name", name, "--nodes", "1", "--cores", "2", "--walltime", "15m"],
        capture_output=True, text=True, env=os.environ,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    try:
        syncs = [start("sync", "--json"), start("sync", "--json")]
        person = start("ship", name, "--json")
        sync_results = [finish(p) for p in syncs]
        code, out, err = finish(person)
        busy = 0
        for rc, sync_out, sync_err in sync_results:
            assert rc == 0, sync_err
            (entry,) = json.loads(sync_out)["exports"]
            assert "error" not in entry, entry
            busy += entry["steps"] == ["busy: skipped"]
        if code == BUSY_EXIT:
            refusal = json.loads(out)  # --json: the refusal is the one answer
            assert refusal["ok"] is False, refusal
            assert "being worked on by another lumberjack" in refusal["error"]
            busy += 1
        else:
            assert code == 0, err
        print(f"[together] {busy} of 3 commands found the export busy")

        # Whichever went first, one more sync takes the export to the site if the others
        # were all turned away: one placement and one pilot, whatever the interleaving.
        again = subprocess.run([sys.executable, "-m", "lumberjack", "sync", "--json"],
                               capture_output=True, text=True, env=os.environ)  # fmt: skip
        assert again.returncode == 0, again.stderr
        launched = json.loads(
            subprocess.run(
                [sys.executable, "-m", "lumberjack", "status", name, "--json"],
                capture_output=True, text=True, env=os.environ, check=True,
            ).stdout
        )  # fmt: skip
        assert launched["placed"] and len(launched["pilots"]) == 1, launched

        deadline = time.monotonic() + 300
        while Ledger().get(name).phase != "imported":
            assert time.monotonic() < deadline, Ledger().get(name).phase
            both = [start("sync", "--json"), start("sync", "--json")]
            for rc, _, sync_err in (finish(p) for p in both):
                assert rc == 0, sync_err
            time.sleep(2)
    finally:
        stop_at_site(name, remote_dir)
    after = tree(job_dir)
    expected = expected_outputs(job_dir, range(2))
    assert {path for path in after if path not in before} == set(expected)
    assert {path: after[path] for path in expected} == expected
    assert after["job.log"].count(b"Job terminated") == 2
    ads = history(cluster, ["ProcId", "JobStatus", "NumJobStarts"], expect=2)
    assert [(a["JobStatus"], a.get("NumJobStarts")) for a in ads] == [(4, 1), (4, 1)]
    assert Ledger().get(name).info["imported"]["completed"] == 2
    steps = [s for s in Ledger().steps(name) if s["step"] == "import" and s["status"] == "done"]
    assert len(steps) == 1, steps
