"""Matchmaking before export, against the testbed's real schedd and site image: jobs no
pilot slot could ever take are refused (one line per cluster: reason and fix) before the
local schedd is changed; --skip-unmatched exports only those that fit; the request
follows the jobs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from journey import lumberjack, make_job_dir, query, submit
from journey import site_connection as connect
from journey import site_sh as sh

from lumberjack.core.slot_ad import RETIRE_ATTR, SITE_IMAGE
from lumberjack.profiles.sites import find_profile

pytestmark = pytest.mark.integration

#: case -> (submit file lines, a word the refusal line must carry); "fits" is not refused
CASES = {
    "fits": ({}, ""),
    "memory": ({"request_memory": "64GB"}, "RequestMemory 65536 MB > "),
    "cpus": ({"request_cpus": "4"}, "RequestCpus 4 > "),
    "gpus": ({"request_gpus": "1"}, "RequestGPUs 1 > 0 GPUs per slot"),
    "disk": ({"request_disk": "20GB"}, "RequestDisk 20GB > 8GB per slot"),
    "os": ({"requirements": '(TARGET.OpSysAndVer == "NoSuchOS9")'}, "NoSuchOS9"),
    "network image": ({"container_image": "docker://python:3.12-slim"}, "apptainer build"),
}


def submit_cases(name: str, cases: dict[str, dict[str, str]]) -> tuple[Path, dict[str, int]]:
    """One real cluster of one job per case (its submit lines), submitted as the
    submitter from a fresh job directory (returned, for more)."""
    import os
    import shutil

    import testbed

    work = testbed.testbed_dir() / "work" / f"{name}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.chown(work, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    job_dir = make_job_dir(work)
    return job_dir, {case: submit(job_dir, 1, **extra) for case, extra in cases.items()}


@pytest.fixture(scope="module")
def clusters(access_point) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """One real cluster per case, submitted once as the submitter."""
    job_dir, found = submit_cases("preflight", {case: extra for case, (extra, _) in CASES.items()})
    found["2 cores 1GB"] = submit(job_dir, 2, request_cpus="2", request_memory="1GB")
    return found


def queue_state(clusters: dict[str, int]) -> list[tuple]:
    constraint = " || ".join(f"ClusterId == {c}" for c in clusters.values())
    ads = query(constraint, ["ClusterId", "ProcId", "JobStatus", "Managed"])
    return sorted((a["ClusterId"], a["ProcId"], a["JobStatus"], a.get("Managed")) for a in ads)


def ids(clusters: dict[str, int], *cases: str) -> list[str]:
    return ["--ids", *(str(clusters[c]) for c in cases)]


def test_unmatched_clusters_are_refused_one_line_each(
    clusters: dict[str, int], state_dir: Path
) -> None:
    before = queue_state(clusters)
    result = lumberjack("export", *ids(clusters, *CASES), "--site", "testbed", check=False)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("error: 6 of 7 clusters can never run at site testbed"), lines
    refused = [line.removeprefix("error: ") for line in lines[1:]]
    assert len(refused) == 6, lines
    for case, (_, word) in CASES.items():
        mine = [line for line in refused if line.startswith(f"cluster {clusters[case]}: ")]
        assert len(mine) == (0 if case == "fits" else 1), (case, refused)
        assert all(word in line for line in mine), (case, mine)
    assert queue_state(clusters) == before
    assert json.loads(lumberjack("exports", "--json").stdout)["exports"] == []


def test_json_lists_the_unmatched(clusters: dict[str, int], state_dir: Path) -> None:
    before = queue_state(clusters)
    result = lumberjack(
        "export", *ids(clusters, "fits", "gpus", "os"), "--site", "testbed", "--json",
        check=False,
    )  # fmt: skip
    assert result.returncode == 2
    answer = json.loads(result.stdout)
    assert answer["ok"] is False and "2 of 3 clusters" in answer["error"]
    assert [u["cluster"] for u in answer["unmatched"]] == sorted([clusters["gpus"], clusters["os"]])
    assert all(u["line"].startswith(f"cluster {u['cluster']}: ") for u in answer["unmatched"])
    assert queue_state(clusters) == before


def test_dry_run_refuses_the_same(clusters: dict[str, int], state_dir: Path) -> None:
    before = queue_state(clusters)
    result = lumberjack(
        "export", *ids(clusters, "memory"), "--site", "testbed", "--dry-run", check=False
    )
    assert result.returncode == 2
    assert f"cluster {clusters['memory']}: RequestMemory 65536 MB" in result.stderr
    assert queue_state(clusters) == before


def test_sites_check_with_jobs_shows_the_same_analysis(
    clusters: dict[str, int], state_dir: Path
) -> None:
    """`sites check SITE -c/--ids` matches the jobs as `export --dry-run` does: the same
    refusal lines and exit code, the same request when they fit; nothing changes."""
    before = queue_state(clusters)
    refused = ids(clusters, "fits", "memory", "os")
    check = lumberjack("sites", "check", "testbed", *refused, check=False)
    dry = lumberjack("export", *refused, "--site", "testbed", "--dry-run", check=False)
    assert (check.returncode, dry.returncode) == (2, 2), check.stderr
    assert check.stderr == dry.stderr and "2 of 3 clusters" in check.stderr
    fits = ids(clusters, "2 cores 1GB")
    check = json.loads(lumberjack("sites", "check", "testbed", *fits, "--json").stdout)
    dry = json.loads(lumberjack("export", *fits, "--site", "testbed", "--dry-run", "--json").stdout)
    # The slot's retire time is the clock's plus the walltime: seconds apart, not equal.
    for answer in (check, dry):
        answer["matchmaking"]["slot_ad"].pop(RETIRE_ATTR)
    assert check["matchmaking"] == dry["matchmaking"] and check["matchmaking"]["matched"] == 2
    assert (check["cores_per_node"], check["memory_per_node_mb"]) == (2, 1024)
    text = lumberjack("sites", "check", "testbed", *fits).stdout
    assert "2 jobs match the slot" in text, text
    assert queue_state(clusters) == before
    assert json.loads(lumberjack("exports", "--json").stdout)["exports"] == []


def test_skip_unmatched_exports_only_what_fits(clusters: dict[str, int], state_dir: Path) -> None:
    before = queue_state(clusters)
    result = lumberjack(
        "export", *ids(clusters, "fits", "memory", "network image"), "--site", "testbed",
        "--skip-unmatched", "--name", "preflight-skip",
    )  # fmt: skip
    assert f"left         cluster {clusters['memory']}: RequestMemory" in result.stdout
    assert "1 job matches the slot" in result.stdout
    try:
        after = {c: managed for c, _, _, managed in queue_state(clusters)}
        assert after[clusters["fits"]] == "External"
        assert after[clusters["memory"]] is None and after[clusters["network image"]] is None
        record = json.loads(lumberjack("exports", "--json").stdout)["exports"][0]
        assert record["clusters"] == [clusters["fits"]]
    finally:
        lumberjack("unexport", "preflight-skip")
    assert queue_state(clusters) == before


def test_request_follows_a_two_core_1gb_cluster(clusters: dict[str, int], state_dir: Path) -> None:
    """The original bug: pilots advertised the profile's 512 MB and the jobs never ran."""
    cluster = clusters["2 cores 1GB"]
    answer = json.loads(
        lumberjack(
            "export", "--ids", str(cluster), "--site", "testbed", "--dry-run", "--json"
        ).stdout
    )
    request = answer["request"]
    assert (request["cores_per_node"], request["memory_per_node_mb"]) == (2, 1024)
    assert request["origins"]["cores"] == f"largest job {cluster}.0 RequestCpus"
    assert request["origins"]["memory"] == f"largest job {cluster}.0 RequestMemory"
    slot = answer["matchmaking"]["slot_ad"]
    assert (slot["Cpus"], slot["Memory"]) == ("2", "1024")
    assert answer["matchmaking"]["matched"] == 2 and answer["matchmaking"]["unmatched"] == []
    # An explicit --memory too small for it is refused with the flag that fixes it.
    small = lumberjack(
        "export", "--ids", str(cluster), "--site", "testbed", "--memory", "512MB", check=False
    )
    assert small.returncode == 2
    assert (
        f"error: cluster {cluster}: RequestMemory 1024 MB > 512 MB per slot: use --memory 1GB"
        in small.stderr.splitlines()
    )


def test_the_site_image_advertises_what_preflight_assumes(site) -> None:  # type: ignore[no-untyped-def]
    image = find_profile("testbed").container.image
    with connect(site) as conn:
        out = sh(
            conn,
            f"apptainer -s exec {shlex.quote(image)} "
            "condor_config_val OPSYS OPSYSANDVER OPSYSNAME ARCH",
        ).stdout.split()
        version = sh(conn, f"apptainer -s exec {shlex.quote(image)} condor_version").stdout
    assert out == [
        SITE_IMAGE.opsys, SITE_IMAGE.opsys_and_ver, SITE_IMAGE.opsys_name, SITE_IMAGE.arch
    ]  # fmt: skip
    assert version.splitlines()[0] == SITE_IMAGE.condor_version
