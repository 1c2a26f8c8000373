"""The pilots' slot ad and the matchmaking before export, evaluated by classad2 (HTCondor's
own ClassAd library) on job ads as condor_submit 25.x writes them."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from lumberjack.ap import matchmaking
from lumberjack.core.answers import IdleShape, Status
from lumberjack.core.records import ContractError, decode
from lumberjack.core.slot_ad import PILOT_ATTR, RETIRE_ATTR, RETIRE_START, SITE_IMAGE
from lumberjack.profiles.request import build_request
from lumberjack.profiles.sites import find_profile

#: condor_submit 25.14's Requirements (seen on the testbed's schedd), before the user's.
SUBMIT_REQUIREMENTS = (
    '(TARGET.Arch == "X86_64") && (TARGET.OpSys == "LINUX") && '
    '(versionGE(split(TARGET.CondorVersion)[1],"25.12.0") || (TARGET.Disk >= RequestDisk)) && '
    "(TARGET.Memory >= RequestMemory) && (TARGET.HasFileTransfer)"
)


def job(cluster: int, proc: int = 0, requirements: str = "", **attrs: object) -> object:
    values = {"RequestCpus": 1, "RequestMemory": 64, "RequestDisk": 1024, **attrs}
    reqs = f"({requirements}) && {SUBMIT_REQUIREMENTS}" if requirements else SUBMIT_REQUIREMENTS
    body = "; ".join(
        f"{k} = {v!r}" if isinstance(v, int) else f'{k} = "{v}"' for k, v in values.items()
    )
    return matchmaking.parse_ad(
        f"[ ClusterId = {cluster}; ProcId = {proc}; JobUniverse = 5; {body}; "
        f"Requirements = {reqs} ]"
    )


@pytest.fixture
def testbed():  # type: ignore[no-untyped-def]
    return find_profile("testbed")


def test_slot_ad_is_a_partitionable_slot_of_the_request(testbed) -> None:  # type: ignore[no-untyped-def]
    request = build_request(testbed, cores=2, memory="1GB")
    slot = matchmaking.site_slot(testbed, request)
    assert (slot["Cpus"], slot["Memory"], slot["GPUs"]) == ("2", "1024", "0")
    assert slot["Disk"] == str(8 * 1024 * 1024)  # the profile's disk_per_node, in KB
    assert slot["PartitionableSlot"] == "true"
    assert (slot["OpSys"], slot["OpSysAndVer"], slot["Arch"]) == (
        '"LINUX"',
        '"Debian0"',
        '"X86_64"',
    )
    assert slot["HasSingularity"] == "true" and slot[PILOT_ATTR] == '"preflight"'
    assert slot["START"].startswith(f"({RETIRE_START}) && ")
    assert slot["Requirements"] == "(START) && (WithinResourceLimits)"


def test_slot_summary_shows_string_attributes_as_their_values(testbed) -> None:  # type: ignore[no-untyped-def]
    slot = matchmaking.site_slot(testbed, build_request(testbed))
    slot["OpSysAndVer"] = '"Alma\\"9"'  # a literal with an escaped quote inside
    del slot["Arch"]
    summary = matchmaking.slot_summary(slot)
    assert 'OpSysAndVer Alma"9, Arch unknown,' in summary


def test_pilot_config_advertises_the_slot_ads_names() -> None:
    from lumberjack.core.contract import ExportLayout
    from lumberjack.site.remote_pool import PoolSettings, pilot_config

    settings = PoolSettings(ExportLayout("/s/x"), "hpc", "10.0.0.1", 9618, "/s/site.sif")
    config = pilot_config(settings)
    assert f'{PILOT_ATTR} = "$ENV(LJ_PILOT_ID)"' in config
    assert f"STARTD_ATTRS = $(STARTD_ATTRS) {PILOT_ATTR} {RETIRE_ATTR}" in config
    assert f"START = {RETIRE_START}" in config


def test_a_job_that_fits_matches(testbed) -> None:  # type: ignore[no-untyped-def]
    analysis = matchmaking.analyze([job(7), job(7, 1)], testbed, build_request(testbed))
    assert analysis.refused == [] and analysis.matched == ["7.0", "7.1"]


CASES = {
    "memory flag": (
        {"RequestMemory": 1024}, {"memory": "512MB"},
        "cluster 3: RequestMemory 1024 MB > 512 MB per slot: use --memory 1GB",
    ),
    "memory default": (
        {"RequestMemory": 1024}, {},
        "cluster 3: RequestMemory 1024 MB > 512 MB per slot: add --memory 1GB",
    ),
    "memory beyond the node": (
        {"RequestMemory": 65536}, {"memory": "2GB"},
        "cluster 3: RequestMemory 65536 MB > 2048 MB per slot: site testbed has no node that "
        "large (queue debug: 2GB per node); lower request_memory",
    ),
    "cpus": (
        {"RequestCpus": 2}, {},
        "cluster 3: RequestCpus 2 > 1 cores per slot: add --cores 2",
    ),
    "gpus": (
        {"RequestGPUs": 1}, {},
        # the testbed's default queue has none; its "gpu" queue has (node g1)
        "cluster 3: RequestGPUs 1 > 0 GPUs per slot, more than a node of queue debug has: "
        "use --queue gpu --gpus 1 (0.5 node-hours)",
    ),
    "gpus, but more nodes than the gpu queue has": (
        {"RequestGPUs": 1}, {"nodes": 3},
        # the hint is checked against the whole request: queue gpu has one node
        "cluster 3: RequestGPUs 1 > 0 GPUs per slot, more than a node of queue debug has: "
        "queue gpu has it but refuses the rest of the request; see `condor_lumberjack sites "
        "check testbed --queue gpu --gpus 1` with your other flags",
    ),
    "disk": (
        {"RequestDisk": 20 * 1024 * 1024}, {},
        "cluster 3: RequestDisk 20GB > 8GB per slot (queue debug's disk_per_node): lower "
        "request_disk",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_resource_refusals_name_the_fix(case: str, testbed) -> None:  # type: ignore[no-untyped-def]
    attrs, flags, line = CASES[case]
    analysis = matchmaking.analyze([job(3, **attrs)], testbed, build_request(testbed, **flags))
    assert analysis.lines() == [line]


def test_an_os_requirement_names_the_site_image(testbed) -> None:  # type: ignore[no-untyped-def]
    # (An OS version is refused with its own line: test_platform_match.py.)
    ads = [job(4, requirements='TARGET.OpSys == "WINDOWS"'), job(5)]
    analysis = matchmaking.analyze(ads, testbed, build_request(testbed))
    assert analysis.lines() == [
        'cluster 4: Requirements (TARGET.OpSys == "WINDOWS") is false for the site '
        "image (OpSys LINUX, OpSysAndVer Debian0, Arch X86_64): no flag helps; change it in "
        "the submit file"
    ]
    assert analysis.matched == ["5.0"]


def test_a_passed_deadline_says_it_is_the_clock(testbed) -> None:  # type: ignore[no-untyped-def]
    """A clause that reads the clock is false because of when, not the site's image."""
    ads = [job(4, requirements="time() < 1000")]
    analysis = matchmaking.analyze(ads, testbed, build_request(testbed))
    assert analysis.lines() == [
        "cluster 4: Requirements (time() < 1000) is false at this time (it reads the "
        "clock): no flag helps; change it in the submit file"
    ]


def test_an_unknown_os_is_not_judged(testbed) -> None:  # type: ignore[no-untyped-def]
    """A site's own HTCondor (runtime none): its OS is not known before launch."""
    profile = find_profile("testbed-nocontainer")
    ads = [job(4, requirements='TARGET.OpSysAndVer == "NoSuchOS9"')]
    analysis = matchmaking.analyze(ads, profile, build_request(profile))
    assert analysis.refused == [] and analysis.matched == ["4.0"]
    assert 'TARGET.OpSysAndVer == "NoSuchOS9"' in analysis.unknown[0]


def test_a_network_image_at_an_air_gapped_site(testbed) -> None:  # type: ignore[no-untyped-def]
    ads = [job(6, ContainerImage="docker://python:3.12-slim")]
    line = matchmaking.analyze(ads, testbed, build_request(testbed)).lines()[0]
    assert line.startswith("cluster 6: container image docker://python:3.12-slim must be ")
    assert "`apptainer build python_3.12-slim.sif docker://python:3.12-slim`" in line
    assert "have no outbound network" in line
    # Where compute nodes reach the internet the pilots still run only shipped images:
    # refused all the same, for that reason, with the same way out.
    online = replace(testbed, outbound_network=True)
    (online_line,) = matchmaking.analyze(ads, online, build_request(online)).lines()
    assert "run only images shipped with the export" in online_line
    assert "`apptainer build python_3.12-slim.sif docker://python:3.12-slim`" in online_line


def test_one_line_per_cluster_whatever_its_procs(testbed) -> None:  # type: ignore[no-untyped-def]
    ads = [job(8, p, RequestMemory=1024) for p in range(3)]
    analysis = matchmaking.analyze(ads, testbed, build_request(testbed))
    assert len(analysis.lines()) == 1 and analysis.refused[0].jobs == ["8.0", "8.1", "8.2"]
    error = matchmaking.Unmatched(analysis, "testbed")
    assert str(error).splitlines()[0] == (
        "1 of 1 clusters can never run at site testbed; nothing was changed"
    )
    assert error.details["unmatched"][0]["line"] == analysis.lines()[0]


def test_the_request_follows_the_largest_job(testbed) -> None:  # type: ignore[no-untyped-def]
    ads = [job(12, RequestCpus=2, RequestMemory=1024), job(13, RequestMemory=768)]
    needs = matchmaking.needs_of(ads)
    request = build_request(testbed, job_needs=needs)
    assert (request.cores_per_node, request.memory_per_node_mb) == (2, 1024)
    assert request.origin("cores") == "largest job 12.0 RequestCpus"
    assert request.origin("memory") == "largest job 12.0 RequestMemory"
    assert request.origin("gpus") == "default"
    assert matchmaking.analyze(ads, testbed, request).refused == []
    # A flag still wins, and a job beyond the node is cut to the node (then refused).
    assert build_request(testbed, cores=1, job_needs=needs).cores_per_node == 1
    huge = matchmaking.needs_of([job(14, RequestMemory=65536)])
    capped = build_request(testbed, job_needs=huge)
    assert capped.memory_per_node_mb == 2048
    assert capped.origin("memory") == "largest job 14.0 RequestMemory, cut to queue debug's limit"


def test_split_and_keeps_strings_and_nested_disjunctions() -> None:
    text = '((A && B)) && (C || (D && E)) && "x && y" == Z'
    assert matchmaking.split_and(text) == ["A", "B", "(C || (D && E))", '"x && y" == Z']


def test_the_site_image_platform_is_the_measured_one() -> None:
    assert SITE_IMAGE.describe() == "OpSys LINUX, OpSysAndVer Debian0, Arch X86_64"


def queue_log() -> dict:
    from lumberjack.core import jobqueuelog as jql

    cluster = jql.Ad(
        "05.-1",
        "Job",
        "Machine",
        {"Requirements": SUBMIT_REQUIREMENTS, "RequestCpus": "1", "RequestDisk": "1024"},
    )
    grown = jql.Ad(
        "5.0",
        "Job",
        "Machine",
        {
            "JobStatus": "1",
            "MemoryUsage": "1536",
            "RequestMemory": "ifThenElse(MemoryUsage =!= undefined, MemoryUsage, 64)",
        },
    )
    small = jql.Ad("5.1", "Job", "Machine", {"JobStatus": "1", "RequestMemory": "64"})
    running = jql.Ad("5.2", "Job", "Machine", {"JobStatus": "2", "RequestMemory": "9999"})
    return {ad.key: ad for ad in (cluster, grown, small, running)}  # fmt: skip


#: A status answer of no jobs, as the agent writes it (the shapes replaced below).
STATUS = {"jobs": {}, "total": 0, "finished": False, "final": False, "held_final": 0,
          "releasable": 0, "wait_until": None, "pool_running": False, "placed": True,
          "pilots": {}}  # fmt: skip


def test_idle_jobs_at_the_site_that_no_slot_takes(testbed) -> None:  # type: ignore[no-untyped-def]
    """An evicted job's RequestMemory grew with its MemoryUsage: status says so."""
    from lumberjack.site.idle_jobs import idle_shapes

    shapes = idle_shapes(queue_log())
    assert sorted((s.example, s.jobs) for s in shapes) == [("5.0", 1), ("5.1", 1)]
    lines = matchmaking.never_match(shapes, testbed, build_request(testbed))
    assert lines == [
        "1 idle (e.g. 5.0): RequestMemory 1536 MB > 512 MB per slot: add --memory 1536MB"
    ]


@pytest.mark.parametrize(
    "shape",
    [
        {"attrs": {"Cmd": "1"}, "jobs": 1, "example": "5.0"},
        {"attrs": {"RequestMemory": "99999"}, "jobs": 1, "example": "5.0; rm"},
        {"attrs": {"RequestMemory": "[[["}, "jobs": 1, "example": "5.0"},
    ],
)  # fmt: skip
def test_a_hostile_idle_report_is_skipped(shape: dict, testbed) -> None:  # type: ignore[no-untyped-def]
    shapes = [IdleShape(**shape)]
    assert matchmaking.never_match(shapes, testbed, build_request(testbed)) == []


@pytest.mark.parametrize(
    "shapes", [None, "x", [1], [{"attrs": {"RequestMemory": 99999}, "jobs": 1, "example": "5.0"}]]
)
def test_an_idle_report_of_the_wrong_shape_is_refused_by_the_contract(shapes: object) -> None:
    with pytest.raises(ContractError, match="idle_shapes"):
        decode(Status, json.dumps({**STATUS, "idle_shapes": shapes}), "status")
