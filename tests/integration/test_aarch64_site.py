"""An aarch64 site on this x86_64 machine (profile testbed-aarch64): the site image built
for aarch64 from the same recipe (once, cached, under qemu-user emulation), a pilot whose
startd runs that image and so advertises Arch = "aarch64" (HTCondor reads it from uname,
which the emulator answers), and a job that requires aarch64 going there and coming home
through `sync` rounds. A job of the wrong architecture is refused before anything changes,
in one line naming the queue that fits, both ways round."""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
import testbed
from journey import (
    SITE_BASE,
    lumberjack,
    make_job_dir,
    query,
    site_path,
    site_run,
    submit_items,
    sync_one,
    tree,
)

from lumberjack.core import jobqueuelog as jql
from lumberjack.profiles.sites import find_profile
from lumberjack.state.ledger import Ledger

pytestmark = pytest.mark.integration

SITE = "testbed-aarch64"
#: The job: what the machine it runs on says it is, through the image's own aarch64 shell.
UNAME_JOB = """#!/bin/sh
echo "machine $(uname -m)"
echo "shell $(od -An -tx1 -j18 -N2 /bin/sh | tr -d ' ')"
"""


@pytest.fixture(scope="module")
def image(site) -> str:  # type: ignore[no-untyped-def]
    """The aarch64 build, made once (cached like the x86_64 one) and installed where the
    profile's [container] image points."""
    why_not = testbed.ensure_emulation("aarch64")
    if why_not:
        pytest.skip(f"this machine cannot run aarch64 binaries (binfmt_misc): {why_not}")
    started = time.monotonic()
    sif = testbed.ensure_site_image(testbed.rootfs_path(), "aarch64")
    print(f"[aarch64] image ready after {time.monotonic() - started:.0f} s: {sif.name} "
          f"({testbed.site_image_versions(sif)['condor']})")  # fmt: skip
    site.install_image(sif, site.aarch64_image)
    site.show_binfmt_misc()  # a site started before enter.sh mounted it
    path = find_profile(SITE).container.image
    assert site.aarch64_image == site.home / Path(path).relative_to("/home")
    return path


@pytest.fixture(scope="module")
def clusters(access_point, workspace_module: Path) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """One job that says it needs aarch64, one with submit's default (X86_64)."""
    job_dir = make_job_dir(workspace_module, "arch")
    (job_dir / "run.sh").write_text(UNAME_JOB)
    common = {"arguments": "", "transfer_input_files": "", "job_machine_attrs": "Arch"}
    return {
        "aarch64": submit_items(job_dir, [{}], requirements='(Arch == "aarch64")', **common),
        "default": submit_items(job_dir, [{}], **common),
    }


@pytest.fixture(scope="module")
def workspace_module(access_point) -> Path:  # type: ignore[no-untyped-def]
    import os

    work = testbed.testbed_dir() / "work" / f"aarch64-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    os.chown(work, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    return work


def startd_ready_s(name: str) -> list[float]:
    """Per pilot node of the export: seconds from its condor_master starting to its first
    slot being Unclaimed (the startd up and advertised), read from the node's logs."""
    found = []
    for start_log in site_path(f"{SITE_BASE}/{name}/pilots/nodes").glob("*/log/StartLog"):
        master = (start_log.parent / "MasterLog").read_text().splitlines()
        ready = [line for line in start_log.read_text().splitlines() if "-> Unclaimed" in line]
        if master and ready:
            begin, end = (datetime.strptime(line[:17], "%m/%d/%y %H:%M:%S")
                          for line in (master[0], ready[0]))  # fmt: skip
            found.append((end - begin).total_seconds())
    return found


def machine_attr_arch(name: str) -> list[str]:
    """MachineAttrArch0 of the jobs in the site's job_queue.log (set when they matched)."""
    log = site_path(f"{SITE_BASE}/{name}/spool/job_queue.log")
    ads = jql.read_log(log) if log.exists() else {}
    found = [ad.get("MachineAttrArch0") for key, ad in ads.items() if jql.key_kind(key) == "proc"]
    return [value.strip('"') for value in found if value]


def states(clusters: dict[str, int]) -> list[tuple]:
    constraint = " || ".join(f"ClusterId == {c}" for c in clusters.values())
    ads = query(constraint, ["ClusterId", "ProcId", "JobStatus", "Managed"])
    return sorted((a["ClusterId"], a["ProcId"], a["JobStatus"], a.get("Managed")) for a in ads)


def test_the_image_is_aarch64_and_its_condor_runs(image: str) -> None:
    out = site_run(f"apptainer -s exec {image} sh -c 'uname -m; condor_version'")
    machine, version, platform = out.splitlines()[:3]
    assert machine == "aarch64", out
    assert version.startswith("$CondorVersion: 25.") and "AARCH64" in platform.upper(), out


def test_a_job_of_the_wrong_arch_is_refused_both_ways(
    clusters: dict[str, int], state_dir: Path
) -> None:
    before = states(clusters)
    for cluster, site, queue, fits in (
        ("default", SITE, "grace", "X86_64"),
        ("aarch64", "testbed", "debug", "aarch64"),
    ):
        result = lumberjack("export", "--ids", str(clusters[cluster]), "--site", site, "--json",
                            check=False)  # fmt: skip
        assert result.returncode == 2, result.stdout + result.stderr
        answer = json.loads(result.stdout)
        [line] = [u["line"] for u in answer["unmatched"]]
        assert f"needs Arch {fits}; queue {queue}'s nodes are " in line, line
        assert re.search(f"; site [-\\w]+'s queue [-\\w]+ has {fits} nodes", line), line
    assert states(clusters) == before
    assert json.loads(lumberjack("exports", "--json").stdout)["exports"] == []


def test_an_aarch64_job_runs_under_emulation_and_comes_home_by_sync(
    image: str, clusters: dict[str, int], state_dir: Path, at_site: list, workspace_module: Path
) -> None:
    job_dir = workspace_module / "arch"
    before = tree(job_dir)
    name = f"arm-{uuid.uuid4().hex[:6]}"
    at_site.append(name)
    started = time.monotonic()
    lumberjack("export", "--ids", str(clusters["aarch64"]), "--site", SITE, "--name", name,
               "--nodes", "1", "--cores", "1", "--walltime", "15m",
               "--idle-shutdown", "20s")  # fmt: skip
    # `sync` as cron runs it, every few seconds; the pilot's logs read while they exist.
    rounds, ready, matched_arch = 0, [], []
    while (phase := Ledger().get(name).phase) != "imported":
        assert time.monotonic() - started < 900, f"{name} still {phase} after {rounds} syncs"
        time.sleep(3 if rounds else 0)
        sync_one(name)
        rounds += 1
        ready = ready or startd_ready_s(name)
        matched_arch = matched_arch or machine_attr_arch(name)
    took = time.monotonic() - started
    print(f"[aarch64] export -> imported: {took:.0f} s in {rounds} sync rounds; condor_master "
          f"start -> startd Unclaimed: {ready} s")  # fmt: skip
    after = tree(job_dir)
    assert set(after) - set(before) >= {"out.0", "err.0"}
    # The job's own words: an aarch64 machine, and /bin/sh an aarch64 ELF (e_machine 0xb7).
    assert after["out.0"].decode().splitlines() == ["machine aarch64", "shell b700"], after["out.0"]
    # The real startd's ad, as the remote schedd matched it (job_machine_attrs copies its
    # Arch into the job ad at the site): Arch came from the machine, not from a config.
    assert matched_arch == ["aarch64"], matched_arch
