"""GPUs: the profile's gpu_vendor / gpu_model / simulate_gpus, the startd's GPU config
(HTCondor's own discovery, simulated only for test sites), the devices passed through to
the startd's container and to each GPU job's nested container."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from conftest import load_fixture_module
from test_sites import NEW_SITES, REAL_SITES, TESTBED_SITES, error_of, write_profile

from lumberjack.core.contract import ExportLayout, LaunchPlan, decode, encode
from lumberjack.profiles.sites import find_profile, load_profile
from lumberjack.site import gpus, remote_pool
from lumberjack.site.job_container import job_container_lines
from lumberjack.site.remote_pool import PoolSettings
from lumberjack.site.runtime import get_runtime

config_values = load_fixture_module("condor_config").config_values

GPU_QUEUE = """
[[queues]]
name = "gpu"
max_nodes = 2
cores_per_node = 32
memory_per_node = "256GB"
gpus_per_node = 4
max_walltime = "01:00:00"
"""


def settings(**overrides) -> PoolSettings:
    values = dict(
        layout=ExportLayout("/scratch/lj/calib"), site_user="hpcuser", address="10.0.0.5",
        port=40123, image="/images/lumberjack-site.sif",
    )  # fmt: skip
    values.update(overrides)
    return PoolSettings(**values)


# ---- profiles ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", REAL_SITES + NEW_SITES + TESTBED_SITES)
def test_every_gpu_queue_names_vendor_and_model(name: str) -> None:
    profile = find_profile(name)
    for queue in profile.queues:
        if queue.gpus_per_node:
            assert queue.gpu_vendor in gpus.GPU_VENDORS, (name, queue.name)
            assert queue.gpu_model, (name, queue.name)
        else:
            assert (queue.gpu_vendor, queue.gpu_model) == (None, None), (name, queue.name)


@pytest.mark.parametrize("name", REAL_SITES + NEW_SITES)
def test_real_profiles_never_simulate_gpus(name: str) -> None:
    assert not any(queue.simulate_gpus for queue in find_profile(name).queues)


def test_real_vendors_pick_their_passthrough() -> None:
    vendors = {
        (site, queue.gpu_vendor)
        for site in REAL_SITES
        for queue in find_profile(site).queues
        if queue.gpus_per_node
    }
    assert ("frontier", "amd") in vendors and ("polaris", "nvidia") in vendors
    assert ("perlmutter", "nvidia") in vendors and ("delta", "nvidia") in vendors


def test_the_testbed_has_a_simulated_gpu_queue() -> None:
    queue = find_profile("testbed").queue("gpu")
    assert (queue.gpus_per_node, queue.gpu_vendor, queue.simulate_gpus) == (2, "nvidia", True)
    assert queue.gpu_model in gpus.SIMULATED_MODELS
    assert find_profile("testbed").default_queue.name == "debug"  # GPU only when asked


def test_a_described_gpu_queue_loads(tmp_path: Path) -> None:
    text = GPU_QUEUE.replace("gpus_per_node = 4", 'gpus_per_node = 4\ngpu_vendor = "amd"\n'
                             'gpu_model = "MI250X"')  # fmt: skip
    from test_sites import MINIMAL

    profile = load_profile(write_profile(tmp_path, text=MINIMAL + "default = true\n" + text))
    queue = profile.queue("gpu")
    assert (queue.gpu_vendor, queue.gpu_model, queue.simulate_gpus) == ("amd", "MI250X", False)
    assert profile.to_dict()["queues"][1]["gpu_vendor"] == "amd"


@pytest.mark.parametrize(
    "edits, expected",
    [
        ({}, "a queue with GPUs needs gpu_vendor; add e.g. gpu_vendor = \"nvidia\""),
        ({"gpus_per_node = 4": 'gpus_per_node = 4\ngpu_vendor = "nvidia"'},
         'a queue with GPUs needs gpu_model; add e.g. gpu_model = "A100-SXM4-40GB"'),
        ({"gpus_per_node = 4": 'gpus_per_node = 4\ngpu_vendor = "ati"\ngpu_model = "x"'},
         '[[queues]][2].gpu_vendor "ati" is not one of the choices; write "nvidia" or "amd"'),
        ({"gpus_per_node = 4": 'gpus_per_node = 4\ngpu_vendor = "nvidia"\ngpu_model = "a;b"'},
         '[[queues]][2].gpu_model "a;b" is not a GPU model name'),
        ({"gpus_per_node = 4": 'gpus_per_node = 0\ngpu_vendor = "nvidia"'},
         '[[queues]][2].gpu_vendor "nvidia" is only for queues with gpus_per_node > 0; '
         "remove it"),
        ({"gpus_per_node = 4": "gpus_per_node = 0\nsimulate_gpus = true"},
         '[[queues]][2].simulate_gpus needs gpu_vendor = "nvidia" and gpus_per_node > 0'),
        ({"gpus_per_node = 4": 'gpus_per_node = 4\ngpu_vendor = "amd"\ngpu_model = "MI250X"\n'
                               "simulate_gpus = true"},
         '[[queues]][2].simulate_gpus needs gpu_vendor = "nvidia" and a gpu_model HTCondor'),
        ({"gpus_per_node = 4": 'gpus_per_node = 4\ngpu_vendor = "nvidia"\ngpu_model = "H100"\n'
                               "simulate_gpus = true"},
         'HTCondor simulates: "GeForce GT 330",'),
    ],
)  # fmt: skip
def test_gpu_queue_errors(tmp_path: Path, edits: dict, expected: str) -> None:
    from test_sites import MINIMAL

    text = GPU_QUEUE
    for old, new in edits.items():
        text = text.replace(old, new)
    message = error_of(write_profile(tmp_path, text=MINIMAL + "default = true\n" + text))
    assert expected in message, message


# ---- the startd ---------------------------------------------------------------------------


def test_a_pilot_with_gpus_discovers_them_with_htcondor() -> None:
    text = remote_pool.pilot_config(settings(gpus=2, gpu_vendor="nvidia", gpu_model="A100"))
    assert "\nuse feature : GPUs\n" in text
    values = config_values(text)
    assert "GPU_DISCOVERY_EXTRA" not in values  # a real site: real discovery
    assert "STARTD_DETECT_GPUS" not in values


def test_only_a_simulating_profile_simulates() -> None:
    text = remote_pool.pilot_config(
        settings(gpus=2, gpu_vendor="nvidia", gpu_model="A100-SXM4-40GB", simulate_gpus=True)
    )
    assert config_values(text)["GPU_DISCOVERY_EXTRA"] == "-simulate:4,2"
    assert gpus.simulation_option("Tesla V100-PCIE-16GB", 3) == "-simulate:2,3"
    with pytest.raises(ValueError, match="cannot simulate"):
        gpus.simulation_option("H100", 1)


def test_a_pilot_without_gpus_offers_none() -> None:
    values = config_values(remote_pool.pilot_config(settings()))
    assert values["STARTD_DETECT_GPUS"] == ""
    assert "use feature : GPUs" not in remote_pool.pilot_config(settings())


# ---- the containers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "vendor, args",
    [("nvidia", ["--nv"]), ("amd", ["--rocm"]), ("intel", ["--bind", "/dev/dri"])],
)
def test_the_vendor_picks_the_startds_passthrough(vendor: str, args: list[str]) -> None:
    node = remote_pool.node_script(
        settings(gpus=1, gpu_vendor=vendor), batch=_slurm(),
        cores=4, memory_mb=4096, walltime_s=3600, retire_s=300,
    )  # fmt: skip
    startd = next(line for line in node.splitlines() if "condor_master -f" in line)
    words = shlex.split(startd.replace("&", ""))
    image = words.index("/images/lumberjack-site.sif")
    assert words[image - len(args) : image] == args
    assert gpus.passthrough_args(vendor, 0) == ()


def test_no_gpus_no_passthrough_and_unknown_vendors_refused() -> None:
    runtime = settings().runtime
    assert "--nv" not in runtime.wrap("/c", "true")
    with pytest.raises(ValueError, match="unknown GPU vendor"):
        gpus.passthrough_args("ati", 1)
    podman = get_runtime("podman-hpc", "/r", image="img", devices=("--nv",))
    assert "--gpu" in podman.prefix("/c") and "--gpu" in podman.start_argv()
    assert "--gpu" not in get_runtime("podman-hpc", "/r", image="img").start_argv()


def test_gpu_jobs_containers_take_nothing_from_the_job_ad() -> None:
    nvidia = config_values(job_container_lines("apptainer", "/i.sif", gpu_vendor="nvidia"))
    assert nvidia["SINGULARITY_EXTRA_ARGUMENTS"] == '"--no-eval"'  # the starter adds --nv itself
    assert nvidia["SINGULARITY_BIND_EXPR"] == '""'
    amd = config_values(job_container_lines("apptainer", "/i.sif", gpu_vendor="amd"))
    assert amd["SINGULARITY_ADD_ROCM_FLAG"] == "TRUE"
    intel = config_values(job_container_lines("apptainer", "/i.sif", gpu_vendor="intel"))
    bind = intel["SINGULARITY_BIND_EXPR"]
    assert "MY.AssignedGPUs" in bind and "/dev/dri" in bind and "TARGET" not in bind
    assert config_values(job_container_lines("apptainer", "/i.sif"))["SINGULARITY_BIND_EXPR"] == (
        '""'
    )


def _slurm():  # -> BatchSystem
    from lumberjack.site.batch import get_batch_system

    return get_batch_system("slurm")


def test_the_plan_carries_the_queues_gpus_to_the_startd() -> None:
    from lumberjack.profiles.request import build_request
    from lumberjack.state.plans import pool_plan

    profile = find_profile("testbed")
    layout = ExportLayout("/home/hpcuser/lumberjack/calib")
    plan = pool_plan(build_request(profile, queue="gpu", gpus=2), profile, layout)
    fields = gpus.pool_settings(plan)
    assert fields == {"gpus": 2, "gpu_vendor": "nvidia", "gpu_model": "A100-SXM4-40GB",
                      "simulate_gpus": True}  # fmt: skip
    config = config_values(remote_pool.pilot_config(settings(**fields)))
    assert config["GPU_DISCOVERY_EXTRA"] == "-simulate:4,2"
    plain = pool_plan(build_request(profile), profile, layout)
    assert gpus.pool_settings(plain)["gpus"] == 0
    # a plan an earlier release wrote, before GPUs: none asked for
    legacy = json.loads(encode(plain))
    del legacy["version"], legacy["gpus"]
    before_gpus = decode(LaunchPlan, json.dumps(legacy), "launch.json")
    assert gpus.pool_settings(before_gpus) == {
        "gpus": 0, "gpu_vendor": "", "gpu_model": "", "simulate_gpus": False,
    }  # fmt: skip
