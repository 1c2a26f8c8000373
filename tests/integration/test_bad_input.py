"""Bad input, on purpose: each case gets a one-line error, a non-zero exit, and changes
nothing (the local queue's jobs keep their state and stay unexported; no ledger entry)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from journey import lumberjack, make_job_dir, query, submit

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def jobs(access_point, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Two idle clusters and one held job, submitted once for every case."""
    import os

    import testbed

    work = testbed.testbed_dir() / "work" / f"bad-input-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.chown(work, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    job_dir = make_job_dir(work)
    idle = submit(job_dir, 2)
    other = submit(job_dir, 1)
    held = submit(job_dir, 1, hold="true")
    missing_dir = make_job_dir(work, "missing")
    missing = submit(missing_dir, 1)
    (missing_dir / "in put.txt").unlink()
    url_remap = submit(
        job_dir, 1, transfer_output_remaps='"renamed.txt = https://example.invalid/x"'
    )
    return {
        "work": work,
        "idle": idle,
        "other": other,
        "held": held,
        "missing": missing,
        "url_remap": url_remap,
    }


def queue_state(jobs: dict) -> list[tuple]:
    """The state of this module's jobs (other tests may share the schedd)."""
    clusters = [v for k, v in jobs.items() if k != "work"]
    constraint = " || ".join(f"ClusterId == {c}" for c in clusters)
    ads = query(constraint, ["ClusterId", "ProcId", "JobStatus", "Managed"])
    return sorted((a["ClusterId"], a["ProcId"], a["JobStatus"], a.get("Managed")) for a in ads)


def spool_args(jobs: dict, name: str) -> list[str]:
    return ["--out", str(jobs["work"] / f"bundle-{name}"), "--remote-spool", "/site/spool"]


CASES = {
    "id not a number": lambda j: ["--ids", "abc"],
    "unknown id": lambda j: ["--ids", "987654"],
    "unknown proc": lambda j: ["--ids", f"{j['idle']}.7"],
    "constraint syntax": lambda j: ["-c", "JobStatus == == 1"],
    "constraint matches nothing": lambda j: ["-c", "Owner == \"nobody-at-all\""],
    "both selectors": lambda j: ["-c", "true", "--ids", str(j["idle"])],
    "no selector": lambda j: [],
    "part of a cluster": lambda j: ["--ids", f"{j['idle']}.1"],
    "held job": lambda j: ["--ids", str(j["held"])],
    "missing input file": lambda j: ["--ids", str(j["missing"])],
    "output remap to a URL": lambda j: ["--ids", str(j["url_remap"])],
    "relative remote spool": lambda j: [
        "--ids", str(j["idle"]), "--out", str(j["work"] / "b-rel"), "--remote-spool", "spool",
    ],
    "bad export name": lambda j: ["--ids", str(j["idle"]), "--name", "../escape"],
    "no destination": lambda j: ["--ids", str(j["idle"]), "--remote-spool", "/site/spool"],
    "unknown site": lambda j: ["--ids", str(j["idle"]), "--site", "no-such-hpc"],
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_export_refuses(case: str, jobs: dict, state_dir: Path) -> None:
    before = queue_state(jobs)
    args = CASES[case](jobs)
    if "--out" not in args and "--remote-spool" not in args and case != "no destination":
        args = [*args, *spool_args(jobs, case.replace(" ", "-"))]
    result = lumberjack("export", *args, check=False)
    assert result.returncode == 2, (case, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert queue_state(jobs) == before
    listing = json.loads(lumberjack("exports", "--json").stdout)
    assert listing["exports"] == []


def test_export_into_non_empty_directory_refuses(jobs: dict, state_dir: Path) -> None:
    target = jobs["work"] / "not-empty"
    target.mkdir(exist_ok=True)
    (target / "precious.txt").write_text("keep me")
    before = queue_state(jobs)
    result = lumberjack(
        "export", "--ids", str(jobs["other"]), "--out", str(target), "--remote-spool", "/s",
        check=False,
    )  # fmt: skip
    assert result.returncode == 2 and "not empty" in result.stderr
    assert queue_state(jobs) == before
    assert (target / "precious.txt").read_text() == "keep me"


def test_export_twice_refuses_the_second(jobs: dict, state_dir: Path) -> None:
    first = jobs["work"] / "twice-1"
    lumberjack("export", "--ids", str(jobs["other"]), "--out", str(first), "--remote-spool", "/s")
    before = queue_state(jobs)
    result = lumberjack(
        "export", "--ids", str(jobs["other"]), "--out", str(jobs["work"] / "twice-2"),
        "--remote-spool", "/s", check=False,
    )  # fmt: skip
    assert result.returncode == 2 and "already exported" in result.stderr
    assert queue_state(jobs) == before
    # Hand them back: unexport is the way out of an export that will not run.
    name = json.loads(lumberjack("exports", "--json").stdout)["exports"][0]["name"]
    lumberjack("unexport", name)
    assert all(s[3] is None for s in queue_state(jobs) if s[0] == jobs["other"])


def test_dry_run_changes_nothing(jobs: dict, state_dir: Path) -> None:
    before = queue_state(jobs)
    target = jobs["work"] / "dry"
    out = lumberjack(
        "export", "--ids", str(jobs["idle"]), "--out", str(target), "--remote-spool", "/s",
        "--dry-run", "--json",
    )  # fmt: skip
    plan = json.loads(out.stdout)
    assert plan["dry_run"] and plan["jobs"] == [f"{jobs['idle']}.0", f"{jobs['idle']}.1"]
    assert queue_state(jobs) == before and not target.exists()


IMPORT_CASES = ["missing dir", "corrupt log", "symlink from site", "directory symlink"]


@pytest.mark.parametrize("case", IMPORT_CASES)
def test_import_refuses_hostile_results(case: str, jobs: dict, state_dir: Path) -> None:
    """A corrupt or hostile spool coming back is refused before anything is placed."""
    bundle = jobs["work"] / f"import-{case.replace(' ', '-')}"
    shutil.rmtree(bundle, ignore_errors=True)
    lumberjack("export", "--ids", str(jobs["idle"]), "--out", str(bundle), "--remote-spool", "/s")
    manifest = json.loads((bundle / "manifest.json").read_text())
    log = bundle / "spool" / "job_queue.log"
    job_dir = bundle / "spool" / str(jobs["idle"]) / "0" / f"cluster{jobs['idle']}.proc0.subproc0"
    job_dir.mkdir(parents=True)
    target = Path(manifest["path_map"]["jobs"][f"{jobs['idle']}.0"]["local_iwd"])
    before_files = sorted(p.name for p in target.iterdir())
    if case == "missing dir":
        bundle_arg = jobs["work"] / "does-not-exist"
    else:
        bundle_arg = bundle
    if case == "corrupt log":
        log.write_text(log.read_text() + "103 1.0 Broken\nnot a record\n")
    elif case == "symlink from site":
        (job_dir / "out.0").symlink_to("/etc/passwd")
    elif case == "directory symlink":
        (job_dir / "_condor_stdout").write_text("x")
        (job_dir / "results").symlink_to("/etc")
    before = queue_state(jobs)
    result = lumberjack("import", "--in", str(bundle_arg), check=False)
    assert result.returncode == 2, (case, result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1
    assert queue_state(jobs) == before
    assert sorted(p.name for p in target.iterdir()) == before_files
    lumberjack("unexport", manifest["name"])


def test_import_takes_what_it_sent_and_reports_a_job_injected_at_the_site(
    jobs: dict, state_dir: Path
) -> None:
    """A job the site added is ignored and named in the report; the export's own jobs
    come back (here idle: they never ran), nothing is placed for the stranger."""
    bundle = jobs["work"] / "import-injected"
    shutil.rmtree(bundle, ignore_errors=True)
    lumberjack("export", "--ids", str(jobs["idle"]), "--out", str(bundle), "--remote-spool", "/s")
    manifest = json.loads((bundle / "manifest.json").read_text())
    log = bundle / "spool" / "job_queue.log"
    log.write_text(log.read_text() + '101 999.0 Job Machine\n103 999.0 Owner "alice"\n')
    target = Path(manifest["path_map"]["jobs"][f"{jobs['idle']}.0"]["local_iwd"])
    before_files = sorted(p.name for p in target.iterdir())
    result = json.loads(lumberjack("import", "--in", str(bundle), "--json").stdout)
    assert result["not_sent"] == ["999.0"]
    assert result["handed_back_idle"] == len(manifest["jobs"])
    assert sorted(p.name for p in target.iterdir()) == before_files
    assert all(s[3] is None for s in queue_state(jobs) if s[0] == jobs["idle"])
