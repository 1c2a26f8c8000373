"""The contract between the access point and the site agent (core/contract.py): one
serialisation for every file that crosses the link, read strictly on both sides, and the
unversioned files an earlier release left at a site still read."""

from __future__ import annotations

import json

import pytest
from conftest import load_fixture_module

from lumberjack.core.contract import (
    RUNTIME_NAMES,
    ContractError,
    ExportLayout,
    GpuPlan,
    LaunchPlan,
    PilotRequest,
    PilotSpec,
    PoolState,
    ReleasePlan,
    SubmittedPilots,
    decode,
    encode,
)
from lumberjack.profiles.request import build_request
from lumberjack.profiles.sites import find_profile
from lumberjack.site.runtime import RUNTIMES
from lumberjack.state.plans import pool_plan

site_bundle = load_fixture_module("site_bundle")
LAYOUT = ExportLayout("/home/hpcuser/lumberjack/calib")


def shipped(**overrides) -> dict:
    """A plan as the access point writes it, as JSON data, with `overrides`."""
    data = json.loads(encode(site_bundle.launch_plan()))
    data.update(overrides)
    return data


def read(data: object) -> LaunchPlan:
    return decode(LaunchPlan, json.dumps(data), "launch.json")


def test_every_type_goes_there_and_back_unchanged() -> None:
    profile = find_profile("testbed")
    plan = pool_plan(build_request(profile, queue="gpu", gpus=2), profile, LAYOUT)
    assert decode(LaunchPlan, encode(plan), "launch.json") == plan
    release = ReleasePlan("a" * 64, "/b/htcondor/x.tar.gz", "/b/htcondor/x")
    joined = site_bundle.launch_plan(
        runtime="none", image="", condor_release=release, lease="/b/lease-x",
        gpus=GpuPlan("nvidia", "TITAN RTX"),
    )  # fmt: skip
    assert decode(LaunchPlan, encode(joined), "launch.json") == joined
    for report in (PoolState("10.0.0.5", 40123), SubmittedPilots(("101", "102.pbs01"))):
        assert decode(type(report), encode(report), "report") == report
    assert json.loads(encode(joined))["version"] == LaunchPlan.VERSION


def test_the_plan_holds_the_request_and_the_agent_names_the_pilots() -> None:
    plan = site_bundle.launch_plan()
    assert set(json.loads(encode(plan))["spec"]) == {
        name for name in PilotRequest.__dataclass_fields__
    }
    spec = PilotSpec.of(plan.spec, name="lj-calib-1", node_command="n", retire_command="r",
                        output_dir="/o")  # fmt: skip
    asked = {name: getattr(spec, name) for name in PilotRequest.__dataclass_fields__}
    assert PilotRequest(**asked) == plan.spec and spec.walltime_s == plan.spec.walltime_s


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (shipped(extra=1), "unknown field 'extra'"),
        (shipped(pilots="2"), "pilots: not an int"),
        (shipped(pilots=True), "pilots: not an int"),
        (shipped(pilots=0), "pilots must be >= 1"),
        (shipped(runtime="docker"), "runtime 'docker' is not one of"),
        (shipped(placement="moon"), "placement 'moon' is not one of"),
        (shipped(binds="/scratch"), "binds: not a list"),
        (shipped(lease="relative/dir"), "lease directory 'relative/dir' is not an absolute"),
        (shipped(version=2), "has version 2; this side reads version 1"),
        (shipped(spec={**shipped()["spec"], "name": "lj-x"}), "spec: unknown field 'name'"),
        (shipped(spec={**shipped()["spec"], "queue": "a b"}), "characters a directive"),
        (shipped(spec={**shipped()["spec"], "env": {"A": 1}}), "env['A']: not a str"),
        (shipped(gpus=None), "gpus: not an object"),
        ({k: v for k, v in shipped().items() if k != "batch_system"}, "batch_system"),
        ([1, 2], "launch.json: not an object"),
    ],
)
def test_a_hostile_plan_is_refused_in_one_line(data: object, message: str) -> None:
    with pytest.raises(ContractError) as caught:
        read(data)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith("launch.json")


def test_not_json_is_refused() -> None:
    with pytest.raises(ContractError, match="^launch.json is not JSON"):
        decode(LaunchPlan, b"{", "launch.json")


def test_files_an_earlier_release_left_at_the_site_are_still_read() -> None:
    # Its plan had no version, and its pilot spec held what the agent now names.
    legacy = shipped()
    del legacy["version"], legacy["gpus"]
    legacy["spec"] = {**legacy["spec"], "name": "lj-calib", "node_command": "/n/node.sh",
                      "retire_command": "true", "output_dir": "/n/out"}  # fmt: skip
    legacy["image"] = None
    plan = read(legacy)
    assert plan.spec == site_bundle.launch_plan().spec and plan.gpus == GpuPlan()
    assert plan.image == ""
    # its reports: a bare list of pilots, and the pool's address without a version
    assert decode(SubmittedPilots, '["7", "8"]', "s").job_ids == ("7", "8")
    state = decode(PoolState, '{"address": "10.0.0.5", "port": 9618}', "p")
    assert state == PoolState("10.0.0.5", 9618)


def test_a_hostile_report_is_refused() -> None:
    with pytest.raises(ContractError, match="is not a batch job id"):
        decode(SubmittedPilots, '{"version": 1, "job_ids": ["7; rm -rf ~"]}', "s")
    with pytest.raises(ContractError, match="port 70000 is not a TCP port"):
        decode(PoolState, '{"version": 1, "address": "a", "port": 70000}', "p")


def test_the_contract_names_the_runtimes_the_agent_has() -> None:
    assert set(RUNTIME_NAMES) == set(RUNTIMES)
