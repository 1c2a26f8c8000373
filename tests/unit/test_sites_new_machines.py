"""The Grace-Hopper (aarch64) and European profiles of issue 37 (vista, alps, lumi,
leonardo, deltaai, jupiter, juwels-booster, marenostrum5): each value the tests hold them
to is one the profile's comments cite, from the centre's documentation or, where marked
NOT CONFIRMED, from the public evidence the file names; `sites check` takes a realistic
request at each and refuses one over its limits in one line, exit 2, as a user types it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_sites import NEW_SITES

from lumberjack.cli import cli
from lumberjack.profiles.queue_tables import GPU_PROPERTY_KEYS
from lumberjack.profiles.sites import find_profile, shipped_profile_dir

#: site -> (a request the site takes, one over its limits, the refusal's words)
REQUESTS = {
    "vista": (
        ["--queue", "gh", "--nodes", "4", "--walltime", "12:00:00"],
        ["--queue", "gh-dev", "--nodes", "4", "--walltime", "04:00:00"],
        'exceeds queue "gh-dev" of site "vista" (max 02:00:00)',
    ),
    "alps": (
        ["--queue", "normal", "--nodes", "8", "--walltime", "12:00:00"],
        ["--queue", "normal", "--walltime", "36:00:00"],
        'exceeds queue "normal" of site "alps" (max 24:00:00)',
    ),
    "lumi": (
        ["--queue", "small-g", "--gpus", "2", "--cores", "14", "--memory", "120GB",
         "--walltime", "24:00:00", "--allocation", "project_465000123"],
        ["--queue", "small", "--memory", "300GB", "--allocation", "project_465000123"],
        'exceeds queue "small" of site "lumi"',
    ),
    "leonardo": (
        ["--queue", "boost", "--gpus", "4", "--cores", "32", "--memory", "400GB",
         "--nodes", "2", "--allocation", "EUHPC_X01_001"],
        ["--queue", "boost", "--gpus", "8", "--allocation", "EUHPC_X01_001"],
        'exceeds queue "boost" of site "leonardo" (max 4 GPUs per node)',
    ),
    "deltaai": (
        ["--gpus", "2", "--cores", "144", "--nodes", "2", "--allocation", "abcd-dtai-gh"],
        ["--gpus", "8", "--allocation", "abcd-dtai-gh"],
        'exceeds queue "ghx4" of site "deltaai" (max 4 GPUs per node)',
    ),
    "jupiter": (
        ["--nodes", "16", "--walltime", "12:00:00", "--allocation", "cjsc"],
        ["--walltime", "30:00:00", "--allocation", "cjsc"],
        'exceeds queue "booster" of site "jupiter" (max 24:00:00)',
    ),
    "juwels-booster": (
        ["--queue", "develbooster", "--nodes", "2", "--allocation", "cjsc"],
        ["--queue", "develbooster", "--nodes", "8", "--allocation", "cjsc"],
        'exceeds queue "develbooster" of site "juwels-booster" (max 4 nodes)',
    ),
    "marenostrum5": (
        ["--queue", "acc", "--nodes", "4", "--walltime", "48:00:00", "--allocation", "ehpc123"],
        ["--queue", "acc-debug", "--walltime", "03:00:00", "--allocation", "ehpc123"],
        'exceeds queue "acc-debug" of site "marenostrum5" (max 02:00:00)',
    ),
}  # fmt: skip


def sites_check(site: str, flags: list[str], *more: str):  # type: ignore[no-untyped-def]
    runner = CliRunner()
    return runner.invoke(cli, ["sites", "check", site, *flags, *more], prog_name="x")


def test_every_new_site_has_its_cases() -> None:
    assert sorted(REQUESTS) == sorted(NEW_SITES)


@pytest.mark.parametrize("site", NEW_SITES)
def test_a_realistic_request_passes_and_one_over_the_limits_is_refused(site: str) -> None:
    fits, over, words = REQUESTS[site]
    answer = sites_check(site, fits, "--json")
    assert answer.exit_code == 0, answer.output
    request = json.loads(answer.stdout)
    assert request["ok"] is not False and request["site"] == site
    refused = sites_check(site, over)
    assert refused.exit_code == 2
    [line] = refused.output.strip().splitlines()
    assert line.startswith("error: ") and words in line, line


@pytest.mark.parametrize("site", NEW_SITES)
def test_each_new_site_is_checked_and_cites_its_sources(site: str) -> None:
    profile = find_profile(site)
    assert profile.checked in ("2026-11-27", "2026-11-28") and profile.source.startswith("https://")
    head = (shipped_profile_dir() / f"{site}.toml").read_text().split("\n[site]")[0]
    # What the documentation did not say is said, not guessed.
    assert "Docs silent" in head or "NOT CONFIRMED" in head


def test_facts_of_the_new_sites() -> None:
    facts = {
        name: (p.auth, p.schedd.placement, p.container.runtime, p.batch_system,
               p.allocation_required, sorted({q.arch for q in p.queues}))
        for name in NEW_SITES
        for p in [find_profile(name)]
    }  # fmt: skip
    assert facts == {
        "vista": ("mfa", "allocation", "apptainer", "slurm", False, ["aarch64"]),
        "alps": ("key", "allocation", "container-engine", "slurm", False, ["aarch64"]),
        "lumi": ("key", "login", "singularity", "slurm", True, ["X86_64"]),
        "leonardo": ("key", "allocation", "singularity", "slurm", True, ["X86_64"]),
        "deltaai": ("mfa", "allocation", "apptainer", "slurm", True, ["aarch64"]),
        "jupiter": ("key", "allocation", "apptainer", "slurm", True, ["aarch64"]),
        "juwels-booster": ("key", "allocation", "apptainer", "slurm", True, ["X86_64"]),
        "marenostrum5": ("key", "allocation", "singularity", "slurm", True, ["X86_64"]),
    }
    assert find_profile("vista").batch.memory_request is False  # TACC refuses --mem
    assert find_profile("alps").login_host == "daint.alps.cscs.ch"
    assert find_profile("alps").outbound_network is True  # compute nodes reach out via NAT


def test_gpu_queues_of_the_new_sites() -> None:
    gpus = {
        (name, q.name): (q.gpus_per_node, q.gpu_vendor, q.gpu_model, q.gpu_capability,
                         q.gpu_memory_mb)
        for name in NEW_SITES
        for q in find_profile(name).queues
        if q.gpus_per_node
    }  # fmt: skip
    assert gpus == {
        ("vista", "gh"): (1, "nvidia", "H200 (GH200)", 9.0, 98304),
        ("vista", "gh-dev"): (1, "nvidia", "H200 (GH200)", 9.0, 98304),
        ("alps", "normal"): (4, "nvidia", "H100 (GH200)", 9.0, None),
        ("alps", "debug"): (4, "nvidia", "H100 (GH200)", 9.0, None),
        ("lumi", "standard-g"): (8, "amd", "MI250X", None, 65536),
        ("lumi", "small-g"): (8, "amd", "MI250X", None, 65536),
        ("lumi", "dev-g"): (8, "amd", "MI250X", None, 65536),
        ("leonardo", "boost"): (4, "nvidia", "A100-SXM4-64GB", 8.0, 65536),
        ("leonardo", "boost-debug"): (4, "nvidia", "A100-SXM4-64GB", 8.0, 65536),
        ("deltaai", "ghx4"): (4, "nvidia", "H100 (GH200)", 9.0, 98304),
        ("deltaai", "ghx4-interactive"): (4, "nvidia", "H100 (GH200)", 9.0, 98304),
        ("jupiter", "booster"): (4, "nvidia", "H100 (GH200)", 9.0, 98304),
        ("jupiter", "develbooster"): (4, "nvidia", "H100 (GH200)", 9.0, 98304),
        ("juwels-booster", "booster"): (4, "nvidia", "A100-SXM4-40GB", 8.0, 40960),
        ("juwels-booster", "develbooster"): (4, "nvidia", "A100-SXM4-40GB", 8.0, 40960),
        ("marenostrum5", "acc"): (4, "nvidia", "H100-SXM5-64GB", 9.0, 64809),
        ("marenostrum5", "acc-debug"): (4, "nvidia", "H100-SXM5-64GB", 9.0, 64809),
    }
    # Every GPU queue writes all three device properties (a value or "not documented").
    for name in NEW_SITES:
        text = (shipped_profile_dir() / f"{name}.toml").read_text()
        blocks = [b for b in text.split("[[queues]]")[1:] if "gpus_per_node" in b]
        for block in blocks:
            assert all(f"\n{key} = " in block for key in GPU_PROPERTY_KEYS), (name, block[:40])


def test_a_grace_hopper_slot_is_aarch64_with_its_gpus() -> None:
    answer = sites_check("vista", ["--queue", "gh", "--json"])
    slot = json.loads(answer.stdout)["slot_ad"]
    assert slot["Arch"] == '"aarch64"' and slot["GPUs"] == "1"


def queue_limits(site: str) -> dict[str, tuple]:
    """Each queue's limits as `sites check` judges them (nodes, cores, memory in MB,
    walltime in s, whole nodes, charge factor)."""
    return {
        q.name: (q.max_nodes, q.cores_per_node, q.memory_per_node_mb, q.max_walltime_s,
                 q.whole_node, q.charge_factor)
        for q in find_profile(site).queues
    }  # fmt: skip


def test_limits_of_the_sites_checked_on_2026_11_28() -> None:
    assert queue_limits("deltaai") == {
        "ghx4": (16, 288, 447 * 1024, 48 * 3600, False, 4),
        "ghx4-interactive": (4, 288, 447 * 1024, 2 * 3600, False, 4),
    }
    assert find_profile("deltaai").queue("ghx4").disk_per_node_mb == 3600 * 1024
    assert queue_limits("jupiter") == {
        "booster": (1024, 288, 480 * 1024, 24 * 3600, True, None),
        "develbooster": (4, 288, 480 * 1024, 2 * 3600, True, None),
    }
    assert queue_limits("juwels-booster") == {
        "booster": (384, 48, 490 * 1024, 24 * 3600, True, None),
        "develbooster": (4, 48, 490 * 1024, 2 * 3600, True, None),
    }
    assert queue_limits("marenostrum5") == {
        "acc": (100, 80, 480 * 1024, 72 * 3600, True, None),
        "acc-debug": (8, 80, 480 * 1024, 2 * 3600, True, None),
        "gpp": (800, 112, 240 * 1024, 72 * 3600, False, None),
        "gpp-debug": (32, 112, 240 * 1024, 2 * 3600, False, None),
    }


def test_login_batch_and_network_facts_of_the_sites_checked_on_2026_11_28() -> None:
    said = {
        name: (p.login_host, p.connection_sharing, p.outbound_network, p.batch.gpu_request,
               list(p.batch.setup))
        for name in ["deltaai", "jupiter", "juwels-booster", "marenostrum5"]
        for p in [find_profile(name)]
    }  # fmt: skip
    assert said == {
        "deltaai": ("dtai-login.delta.ncsa.illinois.edu", True, False, "gpus-per-node", []),
        "jupiter": ("login.jupiter.fz-juelich.de", True, False, "gres", []),
        "juwels-booster": ("juwels-booster.fz-juelich.de", True, False, "gres", []),
        "marenostrum5": ("alogin1.bsc.es", True, False, "gres", ["module load singularity"]),
    }
    # JSC blocks a host that opens many connections at once: its profiles say so, and
    # that the key needs JuDoor's from-clause and the container group.
    for name in ("jupiter", "juwels-booster"):
        text = (shipped_profile_dir() / f"{name}.toml").read_text()
        assert "from-clause" in text and "container group" in text, name
    assert find_profile("jupiter").queue("booster").batch_queue == "booster"
    # MareNostrum 5's QOS picks the partition: no partition line, one QOS line per queue.
    qos = {q.name: (q.batch_queue, list(q.directives)) for q in find_profile("marenostrum5").queues}
    assert qos == {
        "acc": ("", ["#SBATCH --qos=acc_ehpc"]),
        "acc-debug": ("", ["#SBATCH --qos=acc_debug"]),
        "gpp": ("", ["#SBATCH --qos=gp_ehpc"]),
        "gpp-debug": ("", ["#SBATCH --qos=gp_debug"]),
    }


def test_a_marenostrum5_pilot_script_names_its_qos_and_no_partition() -> None:
    answer = sites_check(
        "marenostrum5", ["--queue", "acc", "--nodes", "2", "--allocation", "ehpc123"],
        "--show-script",
    )  # fmt: skip
    assert answer.exit_code == 0, answer.output
    script = answer.output.split("--- pilot script", 1)[1]
    header = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --qos=acc_ehpc" in header and "#SBATCH --account=ehpc123" in header
    assert "#SBATCH --gres=gpu:4" in header and "#SBATCH --exclusive" in header
    assert not [line for line in header if line.startswith("#SBATCH --partition")]
    assert "\nmodule load singularity\n" in script


def test_a_marenostrum5_gpu_slot_is_x86_64_with_four_gpus_and_a_gpp_slot_has_none() -> None:
    slots = {
        queue: json.loads(sites_check("marenostrum5", ["--queue", queue, "--allocation",
                                                       "ehpc123", "--json"]).stdout)["slot_ad"]
        for queue in ("acc", "gpp")
    }  # fmt: skip
    assert (slots["acc"]["Arch"], slots["acc"]["GPUs"], slots["acc"]["Cpus"]) == (
        '"X86_64"',
        "4",
        "80",
    )
    assert slots["gpp"]["GPUs"] == "0" and slots["gpp"]["Cpus"] == "1"


def test_alps_devices_carry_the_name_cuda_reports_on_daint() -> None:
    # Re-checked 2026-11-28: CSCS's nccl-tests output names each device; a job's
    # require_gpus on DeviceName is judged, no longer listed as not judged.
    names = {q.name: q.gpu_device_name for q in find_profile("alps").queues}
    assert names == {"normal": "NVIDIA GH200 120GB", "debug": "NVIDIA GH200 120GB"}
    slot = json.loads(sites_check("alps", ["--queue", "debug", "--json"]).stdout)["slot_ad"]
    assert (
        slot["GPUs_GPU_3"]
        == '[ Id = "GPU-3"; Capability = 9.0; DeviceName = "NVIDIA GH200 120GB" ]'
    )
