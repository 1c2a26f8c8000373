"""A queue's CPU architecture and the site image's OS in the preflight: the slot ad
carries the queue's `Arch`, and a job whose Requirements need another architecture (as
condor_submit writes them on an x86_64 machine) or name an OS version is refused in one
line with what fits. Job ads are classad2's, as condor_submit 25.14 writes them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lumberjack.ap import matchmaking
from lumberjack.core.slot_ad import ARCHES
from lumberjack.errors import BadInput
from lumberjack.profiles.request import build_request
from lumberjack.profiles.sites import find_profile, load_profile, load_profiles, shipped_profile_dir

#: condor_submit 25.14's Requirements on the testbed's x86_64 access point (measured with
#: `condor_submit -dry-run`), and what it writes when the submit file names Arch itself.
DEFAULT = (
    '(TARGET.Arch == "X86_64") && (TARGET.OpSys == "LINUX") && '
    '(versionGE(split(TARGET.CondorVersion)[1],"25.12.0") || (TARGET.Disk >= RequestDisk)) && '
    "(TARGET.Memory >= RequestMemory) && (TARGET.HasFileTransfer)"
)
OWN_ARCH = (
    '({arch}) && (TARGET.OpSys == "LINUX") && '
    '(versionGE(split(TARGET.CondorVersion)[1],"25.12.0") || (TARGET.Disk >= RequestDisk)) && '
    "(TARGET.Memory >= RequestMemory) && (TARGET.HasFileTransfer)"
)


def job(requirements: str, cluster: int = 1) -> object:
    return matchmaking.parse_ad(
        f"[ ClusterId = {cluster}; ProcId = 0; JobUniverse = 5; RequestCpus = 1; "
        f"RequestMemory = 64; RequestDisk = 1024; Requirements = {requirements} ]"
    )


def lines(requirements: str, site: str, **flags: object) -> list[str]:
    profile = find_profile(site)
    return matchmaking.analyze(
        [job(requirements)], profile, build_request(profile, **flags)
    ).lines()


def test_the_slot_ad_carries_the_queues_arch() -> None:
    vista = find_profile("vista")
    slot = matchmaking.site_slot(vista, build_request(vista, queue="gh"))
    assert slot["Arch"] == '"aarch64"' and slot["OpSysAndVer"] == '"Debian0"'
    testbed = find_profile("testbed")
    assert matchmaking.site_slot(testbed, build_request(testbed))["Arch"] == '"X86_64"'


def test_a_default_x86_job_is_refused_at_grace_hopper_with_the_fix() -> None:
    [line] = lines(DEFAULT, "vista", queue="gh")
    assert line.startswith(
        'cluster 1: Requirements (TARGET.Arch == "X86_64") needs Arch X86_64; '
        "queue gh's nodes are aarch64; site "
    )
    other = re.search(r"; site (\S+)'s queue (\S+) has X86_64 nodes;", line)
    assert other, line
    assert find_profile(other[1]).queue(other[2]).arch == "X86_64"
    assert line.endswith(
        'to run it on aarch64, write requirements = (Arch == "aarch64") in the submit file '
        '(condor_submit then leaves out its default (TARGET.Arch == "X86_64")) and give it '
        "aarch64 executables"
    )
    assert "\n" not in line


def test_an_aarch64_job_matches_grace_hopper_and_is_refused_on_x86() -> None:
    arm = OWN_ARCH.format(arch='Arch == "aarch64"')
    assert lines(arm, "vista", queue="gh") == []
    [line] = lines(arm, "testbed")
    head = (
        'cluster 1: Requirements (Arch == "aarch64") needs Arch aarch64; '
        "queue debug's nodes are X86_64; site "
    )
    assert line.startswith(head), line
    other = re.fullmatch(r".*; site (\S+)'s queue (\S+) has aarch64 nodes", line)
    assert other, line
    assert find_profile(other[1]).queue(other[2]).arch == "aarch64"


def test_a_job_for_either_arch_matches_both() -> None:
    either = OWN_ARCH.format(arch='Arch == "X86_64" || Arch == "aarch64"')
    assert lines(either, "vista") == [] and lines(either, "testbed") == []


def test_a_queue_of_the_same_site_with_the_right_arch_is_named(tmp_path: Path) -> None:
    text = (shipped_profile_dir() / "testbed.toml").read_text()
    arm = '[[queues]]\nname = "arm"\narch = "aarch64"\nmax_nodes = 2\ncores_per_node = 2\n'
    arm += 'memory_per_node = "2GB"\nmax_walltime = "01:00:00"\n\n[batch]'
    path = tmp_path / "testbed.toml"
    path.write_text(text.replace("[batch]", arm, 1))
    profile = load_profile(path)
    analysis = matchmaking.analyze([job(DEFAULT)], profile, build_request(profile, queue="arm"))
    assert analysis.lines()[0].startswith(
        'cluster 1: Requirements (TARGET.Arch == "X86_64") needs Arch X86_64; queue arm\'s '
        "nodes are aarch64: use --queue debug ("
    )


def test_an_os_version_is_refused_with_what_the_image_advertises() -> None:
    for clause in ("OpSysMajorVer == 12", 'OpSysAndVer == "AlmaLinux9"', "OpSysMajorVer >= 9"):
        [line] = lines(f"({clause}) && {DEFAULT}", "testbed")
        assert line == (
            f"cluster 1: Requirements ({clause}) names an OS version, and the site image is "
            'Debian sid (OpSysAndVer "Debian0", OpSysMajorVer 0, OpSysName "Debian"): drop '
            "that clause and bring the OS the job needs as its own image (container_image = "
            "a .sif); see docs/jobs.md"
        )
    # A clause the image's values make true is no refusal.
    assert lines(f'(OpSysName == "Debian") && {DEFAULT}', "testbed") == []


def test_a_sites_own_htcondor_leaves_the_os_version_unjudged() -> None:
    profile = find_profile("testbed-nocontainer")
    ads = [job(f"(OpSysMajorVer == 12) && {DEFAULT}")]
    analysis = matchmaking.analyze(ads, profile, build_request(profile))
    assert analysis.refused == [] and analysis.unknown[0] == "(OpSysMajorVer == 12)"


def test_every_profile_queue_has_a_known_arch() -> None:
    profiles, skipped = load_profiles()
    assert skipped == []
    arches = {(p.name, q.name): q.arch for p in profiles for q in p.queues}
    assert set(arches.values()) <= set(ARCHES)
    # Grace nodes are aarch64; every machine profiled before them is x86_64.
    assert {arches["vista", "gg"], arches["vista", "gh"]} == {"aarch64"}
    assert arches["stampede3", "skx"] == arches["frontier", "batch-small"] == "X86_64"


def test_a_bad_arch_is_one_line_naming_the_choices(tmp_path: Path) -> None:
    text = (shipped_profile_dir() / "testbed.toml").read_text()
    path = tmp_path / "testbed.toml"
    path.write_text(text.replace('name = "debug"\n', 'name = "debug"\narch = "arm64"\n', 1))
    with pytest.raises(BadInput) as refused:
        load_profile(path)
    message = str(refused.value)
    assert "\n" not in message and "[[queues]][1].arch" in message
    assert 'write "X86_64" or "aarch64"' in message
