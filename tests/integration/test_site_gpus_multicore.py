"""The jobs users really submit, on the testbed's GPU node g1 (4 cores, 4 GB, 2 GPUs that
Slurm hands out and HTCondor's own discovery simulates): a `request_gpus = 1` job gets a
device of its own, and jobs of 1, 2 and 4 cores share (or, the whole-node one, take) the
node's partitionable slot. Every step is the real CLI: export, ship, launch, status,
fetch, import."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from journey import (
    SITE_BASE,
    history,
    last_json,
    lumberjack,
    make_job_dir,
    query,
    site_run,
    submit,
    wait_finished,
)
from test_site_journey import Clock, unique, wait_clean

from lumberjack.profiles.sites import find_profile

pytestmark = pytest.mark.integration

#: What condor_gpu_discovery -simulate:4,N calls the simulated devices (HTCondor 25).
SIMULATED_IDS = {"GPU-a0223334", "GPU-b1223334"}

#: The job: what its environment and its slot's machine ad say, around a sleep of $2 s.
PROBE = """#!/bin/sh
echo "start $(date +%s)"
for name in CUDA_VISIBLE_DEVICES _CONDOR_AssignedGPUs GPU_DEVICE_ORDINAL; do
    printf '%s=%s\\n' "$name" "$(printenv "$name" || echo unset)"
done
grep -E '^(Name|Cpus|Memory|AssignedGPUs|AvailableGPUs|DetectedGPUs|GPUs[A-Za-z0-9_]*) = ' \\
    "${_CONDOR_MACHINE_AD:-.machine.ad}"
sleep "${2:-0}"
echo "end $(date +%s)"
"""


def probe_dir(workspace: Path, name: str) -> Path:
    job_dir = make_job_dir(workspace, name)
    probe = job_dir / "probe.sh"
    probe.write_text(PROBE)
    probe.chmod(0o755)
    os.chown(probe, job_dir.stat().st_uid, job_dir.stat().st_gid)
    return job_dir


def probe_output(path: Path) -> dict[str, str]:
    """NAME=VALUE and `Attr = value` lines of a probe's stdout."""
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^(\w+)(?: = |=| )(.*)$", line)
        if match:
            value = match.group(2).strip()
            found[match.group(1)] = value[1:-1] if value[:1] == value[-1:] == '"' else value
    return found


def journey(name: str, clusters: list[int], flags: list[str], jobs: int, clock: Clock) -> float:
    """export, ship, launch, wait, fetch, import; seconds from launch to outputs at home."""
    gpu_nodes = site_run("sinfo -h -p gpu -o %N", check=False).split()
    assert gpu_nodes == ["g1"], (
        "the running testbed has no GPU node g1 (started from code older than it): "
        "restart it with containers/testbed/testbed.py down, then up"
    )
    ids = [str(cluster) for cluster in clusters]
    exported = last_json(
        lumberjack("export", "--ids", *ids, "--site", "testbed", "--queue", "gpu", "--nodes",
                   "1", "--walltime", "20m", "--name", name, *flags, "--json")
    )  # fmt: skip
    assert exported["remote_dir"] == f"{SITE_BASE}/{name}"
    lumberjack("ship", name)
    clock("export and ship")
    launched_at = time.monotonic()
    launched = last_json(lumberjack("launch", name, "--json"))
    assert launched["phase"] == "launched" and len(launched["pilots"]["submitted"]) == 1
    final = wait_finished(name, timeout=420, poll=2)
    assert final["jobs"] == {"completed": jobs}, final
    clock("launch and run")
    assert last_json(lumberjack("fetch", name, "--json"))["phase"] == "fetched"
    imported = last_json(lumberjack("import", name, "--json"))
    assert (imported["jobs"], imported["completed"]) == (jobs, jobs), imported
    took = time.monotonic() - launched_at
    clock(f"fetch and import: outputs at home {took:.1f} s after launch")
    return took


def test_the_simulated_devices_are_what_the_profile_says(access_point) -> None:  # type: ignore[no-untyped-def]
    """The site image's discovery, read by the reader the unit tests use on real devices,
    reports what the testbed profile's GPU properties (the preflight's devices) say."""
    from lumberjack.core.gpu_devices import read_discovery
    from lumberjack.site.gpus import simulation_option

    profile = find_profile("testbed")
    queue = profile.queue("gpu")
    option = simulation_option(queue.gpu_model or "", queue.gpus_per_node)
    output = site_run(
        f"apptainer exec {profile.container.image} "
        f"/usr/libexec/condor/condor_gpu_discovery -properties -extra {option}"
    )
    devices = read_discovery(output)
    assert [d.id for d in devices] == sorted(SIMULATED_IDS), output
    for device in devices:
        assert (device.name, device.capability, device.memory_mb) == (
            queue.gpu_device_name, queue.gpu_capability, queue.gpu_memory_mb
        ), output  # fmt: skip


def test_a_gpu_job_runs_on_its_assigned_device(
    workspace: Path, state_dir: Path, at_site: list
) -> None:
    clock = Clock("gpu")
    job_dir = probe_dir(workspace, "gpu")
    # GPU properties in condor_submit's spellings: the simulated A100s have Capability 8.0
    # and 47661 MB, so 30000 MB fits and 60000 MB is refused at export, nothing changed
    cluster = submit(
        job_dir, 2, executable=str(job_dir / "probe.sh"), arguments="$(Process) 5",
        request_gpus="1", gpus_minimum_capability="8.0", gpus_minimum_memory="30000",
    )  # fmt: skip
    too_big = submit(
        job_dir, 1, executable=str(job_dir / "probe.sh"), request_gpus="1",
        gpus_minimum_memory="60000",
    )  # fmt: skip
    name = unique("gpu")
    _refused_at_export([cluster, too_big], too_big, name)
    _remove(too_big)
    at_site.append(name)
    took = journey(name, [cluster], ["--gpus", "2", "--cores", "2", "--memory", "2GB"], 2, clock)
    print(f"[gpu] launch to the GPU jobs' output at home: {took:.1f} s")

    devices = []
    for proc in range(2):
        seen = probe_output(job_dir / f"out.{proc}")
        assigned = seen["AssignedGPUs"]
        # the device HTCondor assigned the slot is the job's, through the nested
        # container's clean environment
        assert assigned in SIMULATED_IDS, seen
        assert seen["_CONDOR_AssignedGPUs"] == assigned, seen
        # HTCondor gives CUDA the device's full UUID (from the slot's nested GPU ad)
        device = seen["GPUs_" + assigned.replace("-", "_")]
        uuid = re.search(r'DeviceUuid = "([0-9a-f-]+)"', device)
        assert uuid and seen["CUDA_VISIBLE_DEVICES"] == f"GPU-{uuid.group(1)}", seen
        assert seen["GPU_DEVICE_ORDINAL"] == assigned, seen
        assert seen["GPUs"] == "1", seen
        # discovered (simulated) properties, advertised by the startd
        assert seen["GPUs_DeviceName"] == "A100-SXM4-40GB", seen
        assert seen["GPUs_Capability"] == "8.0", seen
        # the device ad countMatches read at the startd: what the preflight assumed
        queue = find_profile("testbed").queue("gpu")
        assert re.search(rf"\bCapability = {queue.gpu_capability}\b", device), device
        assert re.search(rf"\bGlobalMemoryMb = {queue.gpu_memory_mb}\b", device), device
        assert "GPUs_" + assigned.replace("-", "_") in seen["AvailableGPUs"], seen
        assert set(seen["DetectedGPUs"].replace(" ", "").split(",")) == SIMULATED_IDS, seen
        assert re.fullmatch(r"slot1_\d+@pilot-\d+-g1@.+", seen["Name"]), seen
        devices.append(assigned)
    a, b = history(cluster, ["ProcId", "JobCurrentStartDate", "CompletionDate"], expect=2)
    if _overlap(a, b):  # at once on one node: each has a device of its own
        assert set(devices) == SIMULATED_IDS, devices

    lumberjack("cleanup", name)
    assert wait_clean(name, f"{SITE_BASE}/{name}")[0] == []


def _refused_at_export(clusters: list[int], refused: int, name: str) -> None:
    """Export of `clusters` to the GPU queue refuses `refused` for its GPU memory, in
    one line, and changes nothing."""
    states = ["ClusterId", "ProcId", "JobStatus", "Managed"]
    constraint = " || ".join(f"ClusterId == {c}" for c in clusters)
    before = sorted(tuple(ad.get(k) for k in states) for ad in query(constraint, states))
    result = lumberjack(
        "export", "--ids", *map(str, clusters), "--site", "testbed", "--queue", "gpu",
        "--nodes", "1", "--gpus", "2", "--cores", "2", "--memory", "2GB", "--name", name,
        check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("error: 1 of 2 clusters can never run at site testbed"), lines
    assert lines[1].startswith(
        f"error: cluster {refused}: needs GPUs with GlobalMemoryMb >= 60000; "
        "queue gpu has GlobalMemoryMb 47661"
    ), lines
    after = sorted(tuple(ad.get(k) for k in states) for ad in query(constraint, states))
    assert after == before
    assert json.loads(lumberjack("exports", "--json").stdout)["exports"] == []


def _remove(cluster: int) -> None:
    import htcondor2

    schedd = htcondor2.Schedd(
        htcondor2.Collector().locate(htcondor2.DaemonType.Schedd, htcondor2.param["SCHEDD_HOST"])
    )
    schedd.act(htcondor2.JobAction.Remove, f"ClusterId == {cluster}")


def _overlap(a: dict, b: dict) -> bool:
    return a["JobCurrentStartDate"] < b["CompletionDate"] and (
        b["JobCurrentStartDate"] < a["CompletionDate"]
    )


def test_mixed_cores_share_a_node_and_a_whole_node_job_takes_it(
    workspace: Path, state_dir: Path, at_site: list
) -> None:
    clock = Clock("multicore")
    job_dir = probe_dir(workspace, "multicore")
    # (cores, memory MB, seconds), one cluster each: the small ones long enough to run
    # side by side, the whole-node one (all 4 cores of g1) short
    shapes = [(1, 256, 20), (1, 512, 20), (1, 768, 20), (2, 1024, 20), (2, 1536, 20), (4, 2048, 5)]
    clusters = {}
    for index, (cores, memory, seconds) in enumerate(shapes):
        cluster = submit(
            job_dir, 1, executable=str(job_dir / "probe.sh"), arguments=f"0 {seconds}",
            request_cpus=str(cores), request_memory=str(memory),
            output=f"out.{index}", error=f"err.{index}",
        )  # fmt: skip
        clusters[cluster] = index
    name = unique("cores")
    at_site.append(name)
    flags = ["--cores", "4", "--memory", "4GB", "--gpus", "0"]
    journey(name, list(clusters), flags, len(shapes), clock)

    projection = ["ProcId", "LastRemoteHost", "JobCurrentStartDate", "CompletionDate"]
    ads = {index: history(cluster, projection, expect=1)[0] for cluster, index in clusters.items()}
    startds = {ad["LastRemoteHost"].split("@", 1)[1] for ad in ads.values()}
    assert len(startds) == 1, ads  # one node's startd ran them all
    assert re.fullmatch(r"pilot-\d+-g1@.*", startds.pop()), ads
    for index, (cores, memory, _) in enumerate(shapes):
        seen = probe_output(job_dir / f"out.{index}")  # the slot it ran in
        assert int(seen["Cpus"]) == cores and int(seen["Memory"]) >= memory, seen

    small = [ads[index] for index, (cores, _, _) in enumerate(shapes) if cores < 4]
    at_once = max(sum(1 for other in small if _overlap(ad, other)) for ad in small)
    assert at_once >= 2, [(ad["JobCurrentStartDate"], ad["CompletionDate"]) for ad in small]
    whole = ads[len(shapes) - 1]
    assert not any(_overlap(whole, other) for other in small), ads
    clock(f"up to {at_once} jobs at once on g1's slot; the 4-core job alone")

    lumberjack("cleanup", name)
    assert wait_clean(name, f"{SITE_BASE}/{name}")[0] == []
