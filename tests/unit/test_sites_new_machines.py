"""The Grace-Hopper (aarch64) and European profiles of issue 37 (vista, alps, lumi,
leonardo): each value the tests hold them to is one the profile's comments cite from the
centre's documentation; `sites check` takes a realistic request at each and refuses one
over its limits in one line, exit 2, as a user types it."""

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
    assert profile.checked == "2026-11-27" and profile.source.startswith("https://")
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
