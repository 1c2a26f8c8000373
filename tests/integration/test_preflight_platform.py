"""A queue's architecture and the site image's OS version, judged on real jobs of the
testbed's x86_64 access point before anything changes: the Requirements HTCondor's submit
writes by default need X86_64, so they are refused at Grace-Hopper's aarch64 queues with
the submit-file line that fixes it; a job that says `Arch == "aarch64"` matches there
and is refused on the testbed's x86_64 nodes; an OS-version clause is refused with what
the site image advertises. `sites check` and `export --dry-run` ask only the local schedd."""

from __future__ import annotations

import json

import pytest
from journey import lumberjack
from test_preflight import queue_state, submit_cases

pytestmark = pytest.mark.integration

CASES = {
    "default": {},
    "aarch64": {"requirements": '(Arch == "aarch64")'},
    "os version": {"requirements": "(OpSysMajorVer >= 12)"},
}


@pytest.fixture(scope="module")
def clusters(access_point) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """One real cluster per case, submitted once as the submitter."""
    return submit_cases("platform", CASES)[1]


def test_the_default_arch_is_refused_at_grace_hopper(clusters: dict[str, int], state_dir) -> None:  # type: ignore[no-untyped-def]
    before = queue_state(clusters)
    ids = ["--ids", str(clusters["default"]), str(clusters["aarch64"])]
    result = lumberjack("sites", "check", "vista", "--queue", "gh", *ids, "--json", check=False)
    assert result.returncode == 2, result.stderr
    answer = json.loads(result.stdout)
    assert "1 of 2 clusters can never run at site vista" in answer["error"]
    [line] = [u["line"] for u in answer["unmatched"]]
    assert line.startswith(
        f'cluster {clusters["default"]}: Requirements (TARGET.Arch == "X86_64") needs Arch '
        "X86_64; queue gh's nodes are aarch64; site "
    ), line
    assert 'write requirements = (Arch == "aarch64") in the submit file' in line
    # The job that names its architecture fits there alone.
    alone = lumberjack(
        "sites", "check", "vista", "--queue", "gh", "--ids", str(clusters["aarch64"])
    )
    assert "1 job matches the slot" in alone.stdout and "Arch aarch64" in alone.stdout
    assert queue_state(clusters) == before


def test_aarch64_and_os_version_are_refused_on_the_testbed(
    clusters: dict[str, int], state_dir
) -> None:  # type: ignore[no-untyped-def]
    before = queue_state(clusters)
    ids = ["--ids", *(str(clusters[case]) for case in CASES)]
    result = lumberjack(
        "export", *ids, "--site", "testbed", "--dry-run", "--json", check=False
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    answer = json.loads(result.stdout)
    assert "2 of 3 clusters can never run at site testbed" in answer["error"]
    refused = {u["cluster"]: u["line"] for u in answer["unmatched"]}
    assert refused[clusters["aarch64"]].startswith(
        f'cluster {clusters["aarch64"]}: Requirements (Arch == "aarch64") needs Arch '
        "aarch64; queue debug's nodes are X86_64; site "
    ), refused
    assert refused[clusters["os version"]] == (
        f"cluster {clusters['os version']}: Requirements (OpSysMajorVer >= 12) names an "
        'OS version, and the site image is Debian sid (OpSysAndVer "Debian0", OpSysMajorVer 0, '
        'OpSysName "Debian"): drop that clause and bring the OS the job needs as its own '
        "image (container_image = a .sif); see docs/jobs.md"
    )
    assert queue_state(clusters) == before
    assert json.loads(lumberjack("exports", "--json").stdout)["exports"] == []
