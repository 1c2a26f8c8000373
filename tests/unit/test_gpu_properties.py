"""GPU requests judged on the devices' properties: HTCondor's own discovery output (real
H100 and H200, the testbed's simulated A100) read by one reader, the preflight's slot ad
advertising the devices as a startd does, and gpus_minimum_capability,
gpus_minimum_memory, gpus_maximum_capability and require_gpus matched by HTCondor's
countMatches against real sites' GPU queues."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from lumberjack.ap import matchmaking
from lumberjack.core.gpu_devices import GpuDevice, read_discovery, slot_attributes
from lumberjack.core.slot_ad import ad_text
from lumberjack.profiles.queue_tables import GPU_PROPERTY_KEYS, NOT_DOCUMENTED
from lumberjack.profiles.request import build_request
from lumberjack.profiles.sites import find_profile, shipped_profile_dir

FIXTURES = Path(__file__).parent / "fixtures" / "gpu_discovery"
#: condor_submit 25.14's Requirements of a GPU job (seen on the testbed's schedd).
GPU_REQUIREMENTS = (
    '(TARGET.Arch == "X86_64") && (TARGET.OpSys == "LINUX") && '
    '(versionGE(split(TARGET.CondorVersion)[1],"25.12.0") || (TARGET.Disk >= RequestDisk)) && '
    "(TARGET.Memory >= RequestMemory) && "
    "(countMatches(MY.RequireGPUs,TARGET.AvailableGPUs) >= RequestGPUs) && "
    "((TARGET.FileSystemDomain == MY.FileSystemDomain) || (TARGET.HasFileTransfer))"
)


def gpu_job(
    min_capability: float | None = None,
    min_memory: int | None = None,
    max_capability: float | None = None,
    require: str = "",
    gpus: int = 1,
    cluster: int = 40,
) -> object:
    """A job ad as condor_submit writes it for these submit commands (require_gpus first,
    then the maximum, the minimum capability and the minimum memory terms)."""
    attrs, terms = {}, [require] if require else []
    if max_capability is not None:
        attrs["GPUsMaxCapability"] = repr(float(max_capability))
        terms.append("Capability <= GPUsMaxCapability")
    if min_capability is not None:
        attrs["GPUsMinCapability"] = repr(float(min_capability))
        terms.append("Capability >= GPUsMinCapability")
    if min_memory is not None:
        attrs["GPUsMinMemory"] = str(min_memory)
        terms.append("GlobalMemoryMb >= GPUsMinMemory")
    body = "; ".join(f"{name} = {value}" for name, value in attrs.items())
    return matchmaking.parse_ad(
        f"[ ClusterId = {cluster}; ProcId = 0; JobUniverse = 5; RequestCpus = 1; "
        f'RequestMemory = 128; RequestDisk = 1024; RequestGPUs = {gpus}; FileSystemDomain = "ap"; '
        f"{body}; RequireGPUs = {' && '.join(terms)}; Requirements = {GPU_REQUIREMENTS} ]"
    )


def analyze(site: str, queue: str, job: object, gpus: int = 1) -> matchmaking.Analysis:
    profile = find_profile(site)
    request = build_request(profile, queue=queue, gpus=gpus, nodes=1, allocation="p1")
    return matchmaking.analyze([job], profile, request)


# ---- one reader, real and simulated devices ----------------------------------------------


@pytest.mark.parametrize(
    "fixture, ids, name, capability, memory",
    [
        ("h100-properties-extra.txt", ["GPU-79bb1e07"], "NVIDIA H100 80GB HBM3", 9.0, 81079),
        ("h200-properties-extra.txt", ["GPU-26365d73"], "NVIDIA H200", 9.0, 143156),
        ("a100-simulated-properties-extra.txt", ["GPU-a0223334", "GPU-b1223334"],
         "A100-SXM4-40GB", 8.0, 47661),
    ],
)  # fmt: skip
def test_discovery_output_gives_the_devices(
    fixture: str, ids: list[str], name: str, capability: float, memory: int
) -> None:
    devices = read_discovery((FIXTURES / fixture).read_text())
    assert [d.id for d in devices] == ids
    for device in devices:
        assert (device.name, device.capability, device.memory_mb) == (name, capability, memory)
    # each device's own properties over the common ones
    assert devices[-1].properties["DeviceUuid"].strip('"').startswith(ids[-1][4:])


def test_the_startd_advertises_devices_as_nested_ads() -> None:
    devices = read_discovery((FIXTURES / "h100-properties-extra.txt").read_text())
    attrs = slot_attributes(devices)
    assert attrs["AvailableGPUs"] == "{ GPUs_GPU_79bb1e07 }"
    assert attrs["GPUs_GPU_79bb1e07"].startswith('[ Id = "GPU-79bb1e07"; Capability = 9.0; ')
    assert (attrs["GPUs_Capability"], attrs["GPUs_GlobalMemoryMb"]) == ("9.0", "81079")
    assert attrs["GPUs_DeviceName"] == '"NVIDIA H100 80GB HBM3"'
    assert slot_attributes([]) == {}


@pytest.mark.parametrize(
    "fixture, fits, too_much",
    [("h100-properties-extra.txt", 80000, 90000), ("h200-properties-extra.txt", 140000, 150000),
     ("a100-simulated-properties-extra.txt", 47000, 48000)],
)  # fmt: skip
def test_countmatches_over_real_device_ads(fixture: str, fits: int, too_much: int) -> None:
    """HTCondor's own countMatches, as at the startd, over the devices the reader gives."""
    devices = read_discovery((FIXTURES / fixture).read_text())
    slot = matchmaking.parse_ad(ad_text({**slot_attributes(devices), "Requirements": "true"}))
    clause = "countMatches(MY.RequireGPUs, TARGET.AvailableGPUs) >= RequestGPUs"
    for memory, expected in ((30000, True), (fits, True), (too_much, False)):
        job = gpu_job(min_capability=8.0, min_memory=memory)
        assert matchmaking.evaluate(clause, job, slot) is expected, memory
    assert matchmaking.evaluate(clause, gpu_job(min_capability=9.5), slot) is False


def test_the_testbed_profile_says_what_the_simulation_reports() -> None:
    simulated = read_discovery((FIXTURES / "a100-simulated-properties-extra.txt").read_text())[0]
    queue = find_profile("testbed").queue("gpu")
    assert queue.gpu_model == simulated.name
    assert (queue.gpu_device_name, queue.gpu_capability, queue.gpu_memory_mb) == (
        simulated.name, simulated.capability, simulated.memory_mb
    )  # fmt: skip


# ---- the profiles ---------------------------------------------------------------------------


def _gpu_queues(path: Path) -> list[dict]:
    return [q for q in tomllib.loads(path.read_text()).get("queues", []) if q.get("gpus_per_node")]


@pytest.mark.parametrize("path", sorted(shipped_profile_dir().glob("*.toml")), ids=lambda p: p.stem)
def test_every_gpu_queue_states_its_devices_properties(path: Path) -> None:
    """A value or "not documented", never left out (so nobody guesses later)."""
    for queue in _gpu_queues(path):
        missing = [key for key in GPU_PROPERTY_KEYS if key not in queue]
        assert missing == [], (queue["name"], missing)


def test_the_real_sites_gpu_queues_as_their_centres_document_them() -> None:
    def props(site: str, queue: str) -> tuple:
        q = find_profile(site).queue(queue)
        return q.gpu_device_name, q.gpu_capability, q.gpu_memory_mb

    assert props("perlmutter", "regular-gpu") == ("NVIDIA A100-SXM4-40GB", 8.0, 40960)
    assert props("polaris", "prod-small") == ("NVIDIA A100-SXM4-40GB", 8.0, 40960)
    assert props("stampede3", "h100") == (None, 9.0, 98304)  # 96 GB H100 SXM5
    assert props("delta", "gpuA40x4") == ("NVIDIA A40", 8.6, 49152)
    assert props("frontier", "batch-small") == (None, None, 65536)  # no CUDA capability


def test_gpu_properties_are_checked(tmp_path: Path) -> None:
    from lumberjack.errors import BadInput
    from lumberjack.profiles.sites import load_profile

    text = (shipped_profile_dir() / "testbed.toml").read_text()
    for old, new, expected in (
        ("gpu_capability = 8.0", "gpu_capability = 0.5", "gpu_capability"),
        ("gpu_memory_mb = 47661", 'gpu_memory_mb = "47GB"', "gpu_memory_mb"),
        ('gpus_per_node = 0\n', f'gpus_per_node = 0\ngpu_capability = "{NOT_DOCUMENTED}"\n'
         'gpu_memory_mb = 1024\n', "only for queues with gpus_per_node > 0"),
    ):  # fmt: skip
        path = tmp_path / "testbed.toml"
        path.write_text(text.replace(old, new, 1))
        with pytest.raises(BadInput, match=expected):
            load_profile(path)
    path.write_text(text.replace("gpu_capability = 8.0", f'gpu_capability = "{NOT_DOCUMENTED}"'))
    assert load_profile(path).queue("gpu").gpu_capability is None


# ---- the preflight --------------------------------------------------------------------------


def test_the_preflight_slot_carries_the_queues_devices() -> None:
    profile = find_profile("perlmutter")
    gpu = build_request(profile, queue="regular-gpu", nodes=1, allocation="p1")
    slot = matchmaking.site_slot(profile, gpu)
    assert slot["AvailableGPUs"] == "{ GPUs_GPU_0, GPUs_GPU_1, GPUs_GPU_2, GPUs_GPU_3 }"
    assert slot["GPUs_GPU_3"] == (
        '[ Id = "GPU-3"; Capability = 8.0; DeviceName = "NVIDIA A100-SXM4-40GB"; '
        "GlobalMemoryMb = 40960 ]"
    )
    cpu = build_request(profile, queue="regular-cpu", nodes=1, allocation="p1")
    assert "AvailableGPUs" not in matchmaking.site_slot(profile, cpu)


@pytest.mark.parametrize(
    "site, queue",
    [("perlmutter", "regular-gpu"), ("polaris", "debug"), ("delta", "gpuA100x4"),
     ("stampede3", "h100"), ("testbed", "gpu")],
)  # fmt: skip
def test_the_manuals_gpu_request_matches_real_gpu_queues(site: str, queue: str) -> None:
    analysis = analyze(site, queue, gpu_job(min_capability=8.0, min_memory=30000))
    assert (analysis.matched, analysis.lines(), analysis.unknown) == (["40.0"], [], [])


def test_too_little_gpu_memory_names_the_property_and_a_site_that_has_it() -> None:
    analysis = analyze("perlmutter", "regular-gpu", gpu_job(min_capability=8.0, min_memory=60000))
    assert analysis.lines() == [
        "cluster 40: needs GPUs with GlobalMemoryMb >= 60000; queue regular-gpu has "
        "GlobalMemoryMb 40960 (NVIDIA A100-SXM4-40GB); site leonardo's queue boost has such "
        "GPUs (GlobalMemoryMb 65536 (A100-SXM4-64GB))"
    ]


def test_a_site_named_for_its_gpus_has_the_jobs_architecture() -> None:
    """Capability 9.0 is first found (by name) on Grace-Hopper sites (alps, deltaai,
    jupiter), which an x86_64 job (condor_submit's default Arch clause) refuses: the hint
    names an X86_64 one."""
    line = analyze("perlmutter", "regular-gpu", gpu_job(min_capability=9.0)).lines()[0]
    assert line.endswith(
        "site marenostrum5's queue acc has such GPUs (Capability 9.0 (H100-SXM5-64GB))"
    )


def test_a_queue_of_the_same_site_that_has_them_is_named() -> None:
    analysis = analyze("delta", "gpuA100x4", gpu_job(min_capability=8.0, min_memory=45000))
    assert analysis.lines() == [
        "cluster 40: needs GPUs with GlobalMemoryMb >= 45000; queue gpuA100x4 has "
        "GlobalMemoryMb 40960 (NVIDIA A100-SXM4-40GB): use --queue gpuA40x4"
    ]
    # the testbed's simulated A100s report 47661 MB
    assert analyze("testbed", "gpu", gpu_job(min_memory=45000)).matched == ["40.0"]
    refused = analyze("testbed", "gpu", gpu_job(min_memory=48000)).lines()
    assert refused[0].startswith(
        "cluster 40: needs GPUs with GlobalMemoryMb >= 48000; queue gpu has GlobalMemoryMb 47661"
    )


def test_a_maximum_capability_and_a_required_name() -> None:
    newer = analyze("stampede3", "h100", gpu_job(max_capability=8.0)).lines()
    assert newer == [
        "cluster 40: needs GPUs with Capability <= 8.0; queue h100 has Capability 9.0 (H100); "
        "site anvil's queue gpu has such GPUs (Capability 8.0 (A100-40GB))"
    ]
    named = analyze("delta", "gpuA100x4", gpu_job(require='DeviceName == "NVIDIA A40"'))
    assert named.lines() == [
        'cluster 40: needs GPUs with DeviceName == "NVIDIA A40"; queue gpuA100x4 has '
        "NVIDIA A100-SXM4-40GB: use --queue gpuA40x4"
    ]
    both = gpu_job(min_capability=8.0, require="GlobalMemoryMb > 40000 || Capability >= 9.0")
    assert analyze("stampede3", "h100", both).matched == ["40.0"]


def test_an_undocumented_property_is_not_judged() -> None:
    # Frontier's GCDs: memory documented (64 GB), no CUDA capability
    analysis = analyze("frontier", "batch-small", gpu_job(min_capability=8.0, min_memory=30000))
    assert analysis.matched == ["40.0"] and analysis.lines() == []
    assert analysis.unknown == [
        "GPUs with Capability >= 8.0 (queue batch-small's Capability not documented)"
    ]
    # a documented property still refuses
    refused = analyze("frontier", "batch-small", gpu_job(min_capability=8.0, min_memory=70000))
    assert refused.lines()[0].startswith(
        "cluster 40: needs GPUs with GlobalMemoryMb >= 70000; queue batch-small has "
        "GlobalMemoryMb 65536 (MI250X); site "
    )
    report = matchmaking.report_lines(analysis)
    assert any(line.startswith("not judged") and "Capability >= 8.0" in line for line in report)


def test_more_gpus_than_the_slot_has_is_a_resource_refusal_only() -> None:
    lines = analyze("testbed", "gpu", gpu_job(min_capability=8.0, gpus=3), gpus=2).lines()
    assert len(lines) == 1 and "RequestGPUs 3 > 2 GPUs per slot" in lines[0], lines


def test_device_ad_names_follow_the_startd() -> None:
    assert GpuDevice("GPU-79bb1e07-19c6").ad_name == "GPUs_GPU_79bb1e07_19c6"
