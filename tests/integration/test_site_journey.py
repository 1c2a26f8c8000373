"""The mission, end to end on the testbed: jobs leave the access point, go over SSH to
the emulated HPC site, run in a remote pool whose startds are Slurm pilots on c1..c3,
come back with every output where the submit file said, and nothing is left behind."""

from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
from pathlib import Path

import pytest
from journey import (
    SITE_BASE,
    expected_outputs,
    history,
    last_json,
    lumberjack,
    make_job_dir,
    processes_of,
    query,
    site_leftovers,
    site_path,
    site_run,
    submit,
    tree,
    wait_finished,
)

pytestmark = pytest.mark.integration


class Clock:
    """Prints how long each step took (shown with -s, or when a test fails)."""

    def __init__(self, test: str) -> None:
        self.test = test
        self.start = self.last = time.monotonic()

    def __call__(self, what: str) -> None:
        now = time.monotonic()
        print(f"[{self.test}] {what}: {now - self.last:.1f} s (total {now - self.start:.1f} s)")
        self.last = now


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def wait_clean(name: str, remote_dir: str, timeout: float = 60) -> tuple[list[str], float]:
    """Leftovers of the export at the site, polled until none (Slurm takes a moment to
    finish a cancelled job); what is left at the deadline, and the seconds it took."""
    start = time.monotonic()
    while True:
        left = site_leftovers(name, remote_dir)
        if not left or time.monotonic() - start > timeout:
            return left, time.monotonic() - start
        time.sleep(1)


def test_thirty_jobs_round_trip(workspace: Path, state_dir: Path, at_site: list) -> None:
    clock = Clock("thirty")
    jobs = 32
    failing = {7: 3}
    job_dir = make_job_dir(workspace)
    # Each job sleeps 2 s: long enough that the startds on all three nodes get work.
    cluster = submit(
        job_dir,
        jobs,
        exit_codes=failing,
        arguments="$(Process) $(code) 2",
        transfer_output_files="result.txt, renamed.txt",
    )
    before = tree(job_dir)
    name = unique("thirty")
    clock(f"submitted {jobs} jobs as cluster {cluster}")

    # The cost and the pilot's batch script, shown before anything is spent: the script
    # must be what Slurm receives at launch (checked below), byte for byte.
    shown = last_json(
        lumberjack(
            "export", "--ids", str(cluster), "--site", "testbed", "--nodes", "3", "--cores", "2",
            "--walltime", "20m", "--name", name, "--dry-run", "--show-script", "--json",
        )
    )  # fmt: skip
    assert (shown["request"]["node_hours"], shown["request"]["charged_hours"]) == (1.0, 1.0)
    [script] = shown["pilot_scripts"]
    assert script["name"] == f"lj-{name}-1"
    assert f"#SBATCH --output={SITE_BASE}/{name}/pilots/out/%x-%j.out" in script["script"]
    clock("export --dry-run --show-script")

    exported = last_json(
        lumberjack(
            "export", "--ids", str(cluster), "--site", "testbed", "--nodes", "3", "--cores", "2",
            "--walltime", "20m", "--name", name, "--json",
        )
    )  # fmt: skip
    remote_dir = exported["remote_dir"]
    at_site.append(name)
    assert remote_dir == f"{SITE_BASE}/{name}"
    assert exported["jobs"] == [f"{cluster}.{p}" for p in range(jobs)]
    managed = query(f"ClusterId == {cluster}", ["Managed", "ManagedManager"])
    assert len(managed) == jobs
    assert {(a["Managed"], a["ManagedManager"]) for a in managed} == {("External", "Lumberjack")}
    clock("export")

    shipped = last_json(lumberjack("ship", name, "--json"))
    assert shipped["phase"] == "shipped"
    assert shipped["sent_files"] > 0 and shipped["sent_bytes"] > 0
    again = last_json(lumberjack("ship", name, "--json"))
    assert (again["sent_files"], again["sent_bytes"]) == (0, 0)
    assert again["skipped_files"] == shipped["sent_files"] + shipped["skipped_files"]
    clock(f"ship ({shipped['sent_bytes']} bytes) and ship again (0 bytes)")

    launched = last_json(lumberjack("launch", name, "--json"))
    assert launched["phase"] == "launched"
    assert launched["place"]["placed"] and launched["place"]["jobs"] == jobs
    assert launched["place"]["owners"] == ["alice"]
    assert len(launched["pilots"]["submitted"]) == 1  # one pilot of 3 nodes
    [pilot] = launched["pilots"]["submitted"]
    assert site_run(f"scontrol write batch_script {pilot} -") == script["script"]
    clock("launch")

    seen: dict[int, str] = {}  # every process of this export met while it ran

    def look(answer: dict) -> None:
        seen.update(processes_of(remote_dir))

    final = wait_finished(name, timeout=300, poll=3, on_status=look)
    assert final["jobs"] == {"completed": jobs}
    assert any("condor_schedd" in cmd for cmd in seen.values())
    assert any("squashfuse" in cmd for cmd in seen.values())
    clock("ran at the site")

    fetched = last_json(lumberjack("fetch", name, "--json"))
    assert fetched["phase"] == "fetched" and fetched["stop"]["stopped_schedd"]
    assert fetched["received_files"] >= 3 * jobs
    imported = last_json(lumberjack("import", name, "--json"))
    counts = (imported["jobs"], imported["completed"], imported["handed_back_idle"])
    assert counts == (jobs, jobs, 0)
    clock("fetch and import")

    # Every output byte for byte where the submit file said; nothing else new.
    after = tree(job_dir)
    expected = expected_outputs(job_dir, range(jobs))
    assert {path for path in after if path not in before} == set(expected)
    assert {path: after[path] for path in expected} == expected
    assert all(after[path] == before[path] for path in before if path != "job.log")
    assert after["job.log"].startswith(before["job.log"])
    assert after["job.log"].count(b"Job terminated") == jobs
    assert os.stat(job_dir / "results" / "renamed-0.txt").st_uid == os.stat(job_dir).st_uid

    cleaned = last_json(lumberjack("cleanup", name, "--json"))
    assert cleaned["phase"] == "cleaned"
    assert not site_path(remote_dir).exists()
    assert not (state_dir / "bundles" / name).exists()
    left, took = wait_clean(name, remote_dir)
    assert left == []
    still = {pid: cmd for pid, cmd in seen.items() if _running(pid, cmd)}
    assert still == {}
    clock(f"cleanup (site clean {took:.0f} s later; {len(seen)} processes gone)")

    projection = ["ProcId", "JobStatus", "ExitCode", "Managed", "Owner", "LastRemoteHost"]
    ads = history(cluster, projection, expect=jobs)
    assert [a["ProcId"] for a in ads] == list(range(jobs))
    assert [a["ExitCode"] for a in ads] == [failing.get(p, 0) for p in range(jobs)]
    assert all(a["JobStatus"] == 4 and "Managed" not in a for a in ads)
    assert {a["Owner"] for a in ads} == {"alice"}
    nodes = [re.search(r"@pilot-\w+-(c\d)@", a.get("LastRemoteHost", "")) for a in ads]
    assert all(nodes), [a.get("LastRemoteHost") for a in ads]
    assert {m.group(1) for m in nodes} == {"c1", "c2", "c3"}
    assert query(f"ClusterId == {cluster}", ["ProcId"]) == []
    clock("history merged (the schedd's periodic sweep)")


def _running(pid: int, command: str) -> bool:
    try:
        now = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return False
    return now == command


def test_run_wait(workspace: Path, state_dir: Path, at_site: list) -> None:
    clock = Clock("run --wait")
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 4)
    before = tree(job_dir)
    name = unique("run")
    at_site.append(name)

    result = lumberjack(
        "run", "--ids", str(cluster), "--site", "testbed", "--nodes", "3", "--wait",
        "--poll", "3", "--name", name, "--json", check=False,
    )  # fmt: skip
    clock("run")
    assert result.returncode == 0, result.stderr
    answer = last_json(result)
    assert json.loads(result.stdout) == answer  # --json: exactly one object
    assert answer["export"]["jobs"] == [f"{cluster}.{p}" for p in range(4)]
    assert answer["phase"] == "imported" and answer["ok"]
    assert answer["imported"]["completed"] == 4

    after = tree(job_dir)
    expected = expected_outputs(job_dir, range(4))
    assert {path for path in after if path not in before} == set(expected)
    assert {path: after[path] for path in expected} == expected

    lumberjack("cleanup", name)
    left, _ = wait_clean(name, f"{SITE_BASE}/{name}")
    assert left == []
    clock("cleanup")


def test_request_breaking_limits_refused_before_ssh(
    workspace: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The request is checked against the profile before any login: here the profile's
    login host is a socket of ours that would see any connection attempt."""
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 2)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    shipped = Path(__file__).resolve().parents[2] / "site-profiles" / "testbed.toml"
    text = shipped.read_text()
    text = re.sub(r'(?m)^login_host = ".*"$', 'login_host = "127.0.0.1"', text)
    text = re.sub(r"(?m)^port = \d+$", f"port = {port}", text)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "testbed.toml").write_text(text)
    monkeypatch.setenv("LUMBERJACK_SITE_PROFILES", str(profiles))
    shown = last_json(lumberjack("sites", "show", "testbed", "--json"))
    assert (shown["login_host"], shown["port"]) == ("127.0.0.1", port)

    try:
        for flags in (
            ["--nodes", "99"],
            ["--cores", "3"],
            ["--walltime", "2h"],
            ["--queue", "no-such-queue"],
            ["--gpus", "1"],
        ):
            result = lumberjack(
                "export", "--ids", str(cluster), "--site", "testbed", "--name", "toobig",
                *flags, check=False,
            )  # fmt: skip
            assert result.returncode == 2, (flags, result.stderr)
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error:"), (flags, lines)
            assert result.stdout == ""
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody knocked
    finally:
        listener.close()

    ads = query(f"ClusterId == {cluster}", ["ProcId", "JobStatus", "Managed"])
    assert len(ads) == 2 and all(a["JobStatus"] == 1 and "Managed" not in a for a in ads)
    assert last_json(lumberjack("exports", "--json"))["exports"] == []

    # The control: a request within the limits does try to log in, and fails with 3.
    result = lumberjack(
        "export", "--ids", str(cluster), "--site", "testbed", "--nodes", "1", "--dry-run",
        check=False,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "command", ["ship", "launch", "status", "fetch", "import", "cleanup", "unexport"]
)
def test_bad_names(state_dir: Path, command: str) -> None:
    result = lumberjack(command, "no-such-export", check=False)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no export named 'no-such-export'" in lines[0], lines
    assert result.stdout == ""
    json_result = lumberjack(command, "no-such-export", "--json", check=False)
    assert json_result.returncode == 2
    answer = json.loads(json_result.stdout)
    assert answer["ok"] is False and "no-such-export" in answer["error"]
