"""Resource requests: units, filling from flags/runtimes/defaults, limits, the report."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lumberjack.core.units import (
    format_memory,
    format_walltime,
    parse_hhmmss,
    parse_memory,
    parse_walltime,
)
from lumberjack.errors import BadInput
from lumberjack.profiles.request import (
    SHUTDOWN_MARGIN_S,
    WALLTIME_MARGIN_S,
    JobRuntime,
    ResourceRequest,
    build_request,
    pilot_request,
    report_dict,
    report_lines,
    retire_before_end_s,
)
from lumberjack.profiles.sites import find_profile, list_profiles
from lumberjack.site.batch import PilotSpec, get_batch_system


@pytest.fixture(autouse=True)
def shipped_profiles_only(tmp_path, monkeypatch):
    monkeypatch.delenv("LUMBERJACK_SITE_PROFILES", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def perlmutter():
    return find_profile("perlmutter")


@pytest.fixture
def testbed():
    return find_profile("testbed")


def bad(profile, **kwargs) -> str:
    with pytest.raises(BadInput) as info:
        build_request(profile, **kwargs)
    assert info.value.exit_code == 2
    assert "\n" not in str(info.value)
    return str(info.value)


# ---- units ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("48:00:00", 48 * 3600),
        ("01:30:05", 5405),
        ("90:00", 5400),  # MM:SS
        ("1-12:00:00", 36 * 3600),
        ("1-12:30", 36 * 3600 + 1800),
        ("2h", 7200),
        ("90m", 5400),
        ("45s", 45),
        ("1d12h", 36 * 3600),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("30", 1800),  # plain number: minutes, as sbatch reads it
        (" 2H ", 7200),
    ],
)
def test_parse_walltime(text, seconds):
    assert parse_walltime(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "2x", "1:70:00", "h", "2h 3q", "12:00:99"])
def test_parse_walltime_refuses(text):
    with pytest.raises(ValueError):
        parse_walltime(text)


@given(st.integers(min_value=0, max_value=10_000 * 3600))
def test_walltime_round_trip(seconds):
    assert parse_walltime(format_walltime(seconds)) == seconds
    assert parse_hhmmss(format_walltime(seconds)) == seconds


@pytest.mark.parametrize(
    ("text", "mb"),
    [("4GB", 4096), ("4G", 4096), ("4000MB", 4000), ("4000", 4000), (4000, 4000),
     ("1.5T", 1572864), ("512MiB", 512), ("2gb", 2048), ("1536K", 2)],
)  # fmt: skip
def test_parse_memory(text, mb):
    assert parse_memory(text) == mb


def test_parse_memory_refuses():
    for text in ("lots", "4 PB", "-1GB", ""):
        with pytest.raises(ValueError):
            parse_memory(text)
    with pytest.raises(ValueError, match="no unit"):
        parse_memory("512", unit_required=True)


@given(st.integers(min_value=1, max_value=2**40))
def test_memory_round_trip(mb):
    assert parse_memory(format_memory(mb)) == mb


# ---- filling a request ------------------------------------------------------------------


def test_defaults_of_the_testbed(testbed):
    request = build_request(testbed)
    assert request == ResourceRequest(
        site="testbed",
        queue="debug",
        nodes=1,
        cores_per_node=1,
        memory_per_node_mb=512,
        gpus_per_node=0,
        walltime_s=1800,
        allocation=None,
        pilots=1,
    )
    assert request.origin("nodes") == "profile default"
    assert request.origin("gpus") == "default"


def test_flags_win(testbed):
    request = build_request(
        testbed, nodes=3, cores=2, memory="2GB", walltime="45m", queue="debug", pilots=3
    )
    assert (request.nodes, request.nodes_per_pilot, request.pilots) == (3, 1, 3)
    assert (request.cores_per_node, request.memory_per_node_mb) == (2, 2048)
    assert request.walltime_s == 2700
    assert all(request.origin(k).startswith("--") for k in ("nodes", "cores", "walltime"))


def test_whole_node_queue_takes_the_whole_node(perlmutter):
    request = build_request(perlmutter, queue="debug-gpu", allocation="m1234")
    assert (request.cores_per_node, request.memory_per_node_mb, request.gpus_per_node) == (
        64, 256 * 1024, 4,
    )  # fmt: skip
    assert request.origin("cores") == "whole node"
    # profile default walltime 2 h is cut to the debug queue's 30 min
    assert request.walltime_s == 1800
    assert "cut to queue debug-gpu's limit" in request.origin("walltime")


def test_equality_ignores_origins(testbed):
    assert build_request(testbed, nodes=1) == build_request(testbed)
    assert hash(build_request(testbed, nodes=1)) == hash(build_request(testbed))


# ---- limits -------------------------------------------------------------------------------


def test_too_many_nodes_names_flag_limit_and_ways_out(perlmutter):
    assert bad(perlmutter, nodes=12, queue="debug-cpu", allocation="m1") == (
        '--nodes 12 exceeds queue "debug-cpu" of site "perlmutter" (max 8 nodes); '
        "use --nodes 8, --pilots 2 or --queue regular-cpu (24 node-hours)"
    )


def test_node_limits_apply_per_pilot(perlmutter):
    request = build_request(perlmutter, nodes=16, pilots=2, queue="debug-cpu", allocation="m1")
    assert request.nodes_per_pilot == 8
    assert "(max 8 nodes per pilot)" in bad(
        perlmutter, nodes=18, pilots=2, queue="debug-cpu", allocation="m1"
    )


def test_nodes_must_split_evenly(testbed):
    assert bad(testbed, nodes=5, pilots=2) == (
        "--nodes 5 cannot be split evenly among --pilots 2; use --nodes 4 or 6, or --pilots 1"
    )
    assert bad(testbed, nodes=1, pilots=2) == (
        "--pilots 2 is more than --nodes 1; each pilot needs a node"
    )


def test_minimum_nodes():
    polaris = find_profile("polaris")
    assert bad(polaris, nodes=4, queue="prod-small", allocation="p") == (
        '--nodes 4 is below the minimum of queue "prod-small" of site "polaris" '
        "(10 nodes per pilot); use --nodes 10, --queue debug-scaling (4 node-hours) or "
        "--queue preemptable (4 node-hours)"
    )
    # without --nodes, a queue with a minimum starts there
    assert build_request(polaris, queue="prod-medium", allocation="p").nodes == 25


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"cores": 3}, '--cores 3 exceeds queue "debug" of site "testbed" (max 2 cores per node); '
                       "use --cores 2 or --queue gpu (0.5 node-hours)"),
        ({"memory": "3GB"}, '--memory 3GB exceeds queue "debug" of site "testbed" '
                            "(max 2GB per node); use --memory 2GB or --queue gpu (0.5 node-hours)"),
        ({"gpus": 1}, '--gpus 1 exceeds queue "debug" of site "testbed" (it has no GPUs); '
                      "use --queue gpu (0.5 node-hours)"),
        ({"walltime": "2h"}, '--walltime 02:00:00 exceeds queue "debug" of site "testbed" '
                             "(max 01:00:00); use --walltime 01:00:00"),
        ({"walltime": "soon"}, '--walltime soon is not a duration; write e.g. "02:00:00", '
                               '"90m", "2h" or "1d12h"'),
        ({"memory": "lots"}, '--memory lots is not a memory size; write e.g. "4GB" or "4000MB"'),
        ({"nodes": 0}, "--nodes 0 must be a whole number of 1 or more"),
        ({"cores": 0}, "--cores 0 must be a whole number of 1 or more"),
        ({"gpus": -1}, "--gpus -1 must be a whole number of 0 or more"),
        ({"walltime": "0"}, "--walltime 0 must be longer than 0"),
        ({"queue": "bigmem"}, '--queue bigmem: site "testbed" has no such queue; '
                            "use one of debug, gpu"),
        ({"allocation": "m1; rm"}, "--allocation 'm1; rm' has characters a batch directive "
                                   "cannot hold; use the project name as the centre spells it "
                                   "(e.g. m1234)"),
    ],
)  # fmt: skip
def test_limit_messages(testbed, kwargs, expected):
    assert bad(testbed, **kwargs) == expected


def test_other_queue_suggested_when_it_fits(perlmutter):
    assert bad(perlmutter, gpus=4, allocation="m1") == (
        '--gpus 4 exceeds queue "regular-cpu" of site "perlmutter" (it has no GPUs); '
        "use --queue debug-gpu (0.5 node-hours) or --queue regular-gpu (2 node-hours)"
    )
    assert bad(perlmutter, queue="debug-cpu", walltime="1h", allocation="m1") == (
        '--walltime 01:00:00 exceeds queue "debug-cpu" of site "perlmutter" (max 00:30:00); '
        "use --walltime 00:30:00 or --queue regular-cpu (1 node-hour)"
    )


def test_allocation_required():
    polaris = find_profile("polaris")
    assert bad(polaris) == (
        'site "polaris" charges every job to an allocation (project); '
        "use --allocation NAME with your project's name"
    )
    assert build_request(polaris, allocation="m1234").allocation == "m1234"


def test_allocation_optional_where_the_centre_charges_a_default_project(perlmutter):
    # NERSC and TACC charge the default (or only) project when -A is left out.
    for profile in (perlmutter, find_profile("stampede3")):
        request = build_request(profile)
        assert request.allocation is None
        assert request.origin("allocation") == "none given: the site charges your default project"


# ---- job runtimes, walltime suggestion and retirement ---------------------------------------


def test_walltime_suggested_from_runtimes(testbed):
    request = build_request(testbed, job_runtimes_s=[600, 1200, 900])
    assert request.walltime_s == 1200 + WALLTIME_MARGIN_S
    assert request.max_job_runtime_s == 1200
    assert request.origin("walltime") == "longest job 00:20:00 + 10 min margin"


def test_suggestion_rounds_up_and_caps_at_the_queue(testbed):
    assert build_request(testbed, job_runtimes_s=[601]).walltime_s == 1260
    request = build_request(testbed, job_runtimes_s=[3500])
    assert request.walltime_s == 3600
    assert request.origin("walltime").endswith("capped at the queue maximum")


def test_job_longer_than_the_queue_names_job_attribute_and_queue(perlmutter):
    runtime = JobRuntime(3600, job="12.0", attribute="MaxRuntime")
    assert bad(perlmutter, queue="debug-cpu", allocation="m1", job_runtimes_s=[runtime]) == (
        'job 12.0 asks for 01:00:00 (MaxRuntime), more than queue "debug-cpu" of site '
        '"perlmutter" allows (max 00:30:00); use --queue regular-cpu (1.17 node-hours), or '
        "shorten the job"
    )
    assert "no queue there is long enough" in bad(
        perlmutter, allocation="m1", job_runtimes_s=[JobRuntime(100 * 3600)]
    )


def test_explicit_walltime_shorter_than_a_job(testbed):
    assert bad(testbed, walltime="20m", job_runtimes_s=[1800]) == (
        "--walltime 00:20:00 is shorter than the longest job: a job asks for 00:30:00; "
        "use --walltime 00:40:00 or more"
    )


def test_retire_with_known_runtimes(testbed):
    request = build_request(testbed, job_runtimes_s=[1200])
    assert retire_before_end_s(request) == 1200 + SHUTDOWN_MARGIN_S
    tight = build_request(testbed, walltime="21m", job_runtimes_s=[1200])
    assert retire_before_end_s(tight) == 1200  # never less than the longest job


@pytest.mark.parametrize(
    ("walltime", "retire"),
    [("01:00:00", 360), ("00:10:00", 120), ("48:00:00", 1800), ("00:02:00", 60)],
)
def test_retire_without_runtimes(walltime, retire):
    request = ResourceRequest("s", "q", 1, 1, 1, 0, parse_walltime(walltime), None)
    assert retire_before_end_s(request) == retire


@given(
    walltime=st.integers(min_value=1, max_value=200 * 3600),
    runtime=st.one_of(st.none(), st.integers(min_value=1, max_value=200 * 3600)),
)
def test_retire_never_beyond_the_walltime(walltime, runtime):
    if runtime is not None and runtime > walltime:
        runtime = walltime
    request = ResourceRequest("s", "q", 1, 1, 1, 0, walltime, None, max_job_runtime_s=runtime)
    retire = retire_before_end_s(request)
    assert 0 <= retire <= walltime
    if runtime:
        assert retire >= runtime


# ---- report and pilot specs -------------------------------------------------------------------


def test_report_lines(testbed):
    request = build_request(testbed, nodes=3, pilots=3)
    lines = report_lines(request, testbed)
    assert lines[0].startswith("site         testbed")
    nodes = next(line for line in lines if line.startswith("nodes"))
    assert nodes.split()[:2] == ["nodes", "3"]
    assert nodes.endswith("(from --nodes)")
    cores = next(line for line in lines if line.startswith("cores"))
    assert cores.endswith("(profile default; change with --cores)")
    assert any(line.startswith("pilots       3 (1 node each)") for line in lines)
    assert any(line.startswith("retire       00:03:00") for line in lines)
    assert lines[-1].startswith("cost         at most 1.5 node-hours ")
    assert any(line.startswith("running      no cap ") for line in lines)


def test_report_shows_the_sites_policy_cap():
    polaris = find_profile("polaris")
    request = build_request(polaris, allocation="proj1")
    assert any(
        line.startswith("running      64 jobs at once ") for line in report_lines(request, polaris)
    )
    assert report_dict(request, polaris)["max_running_jobs"] == 64


def test_report_dict(perlmutter):
    request = build_request(perlmutter, allocation="m1", job_runtimes_s=[3600])
    data = report_dict(request, perlmutter)
    assert data["walltime"] == "01:10:00"
    assert data["batch_queue"] == ""
    assert data["origins"]["allocation"] == "--allocation"
    assert data["retire_before_end_s"] == 3600 + SHUTDOWN_MARGIN_S


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_every_shipped_profile_renders_a_valid_pilot(tmp_path):
    for profile in list_profiles():
        request = build_request(profile, allocation="proj1")
        spec = PilotSpec.of(
            pilot_request(request, profile, env={"LJ_EXPORT": "calib"}),
            name=f"lj-{profile.name}-p0",
            node_command="run-startd",
            retire_command="retire-startds",
            output_dir="/site/lumberjack/logs",
        )
        assert spec.nodes == request.nodes_per_pilot
        assert spec.queue == profile.default_queue.batch_queue
        script = get_batch_system(profile.batch_system).render_pilot_script(spec)
        for line in (*profile.batch.extra_directives, *profile.default_queue.directives):
            assert line in script
        path = Path(tmp_path / f"{profile.name}.sh")
        path.write_text(script)
        result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, (profile.name, result.stderr)
