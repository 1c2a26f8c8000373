"""Runtime "none" on the testbed: no container at the site. lumberjack ships an HTCondor
release tarball (the testbed builds it from its own HTCondor) once per site, the agent
unpacks it under <base_dir>/htcondor/, and the pool and the pilots run from there: the
journey comes home byte for byte, and the daemons' executables are the shipped ones,
not the site's /usr/sbin, with no Apptainer anywhere. Both schedd placements: the pool on
the login node, and the pool inside the allocation (its first node runs it from the
release on the shared filesystem)."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from pathlib import Path

import pytest
import testbed
from journey import (
    SITE_BASE,
    expected_outputs,
    last_json,
    lumberjack,
    make_job_dir,
    processes_of,
    site_leftovers,
    site_path,
    submit,
    tree,
    wait_finished,
)

pytestmark = pytest.mark.integration

SITE = "testbed-nocontainer"
JOBS = 6


@pytest.fixture(params=["login", "allocation"])
def site_name(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """The shipped testbed-nocontainer profile, or a copy of it (a profile of the user's
    own, as a site admin would write one) with the schedd inside the allocation."""
    if request.param == "login":
        return SITE
    from lumberjack.profiles.sites import shipped_profile_dir

    text = (shipped_profile_dir() / f"{SITE}.toml").read_text()
    assert 'placement = "login"' in text
    text = text.replace(f'name = "{SITE}"', f'name = "{SITE}-alloc"')
    text = text.replace('placement = "login"', 'placement = "allocation"')
    (tmp_path / f"{SITE}-alloc.toml").write_text(text)
    monkeypatch.setenv("LUMBERJACK_SITE_PROFILES", str(tmp_path))
    return f"{SITE}-alloc"


def daemons(remote_dir: str) -> dict[int, tuple[str, os.stat_result, str]]:
    """PID -> (program, stat of its executable) of every HTCondor daemon of the export
    (its pool's and its pilots'), read as root from /proc: the site has no PID namespace."""
    found = {}
    for pid in processes_of(remote_dir):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            exe = os.stat(f"/proc/{pid}/exe")  # the file the process runs, wherever it is
            shown = os.readlink(f"/proc/{pid}/exe")  # its path, for messages
        except OSError:
            continue
        if comm.startswith("condor_"):
            found[pid] = (comm, exe, shown)
    return found


def test_journey_without_a_container(
    site_name: str, workspace: Path, state_dir: Path, at_site: list
) -> None:
    in_allocation = site_name != SITE
    tarball = testbed.testbed_dir() / testbed.CONDOR_TARBALL_LINK
    sha256 = hashlib.sha256(tarball.read_bytes()).hexdigest()
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, JOBS, arguments="$(Process) 0 2")
    before = tree(job_dir)
    name = f"bare-{uuid.uuid4().hex[:6]}"

    exported = last_json(
        lumberjack(
            "export", "--ids", str(cluster), "--site", site_name, "--nodes", "2", "--cores", "2",
            "--walltime", "20m", "--name", name, "--json",
        )
    )  # fmt: skip
    remote_dir = exported["remote_dir"]
    at_site.append(name)

    shipped = last_json(lumberjack("ship", name, "--json"))
    release = shipped["condor_release"]
    assert release["tarball"] == f"{SITE_BASE}/htcondor/{sha256[:16]}.tar.gz"
    # One copy per site: the same bytes there (sent now, or by an earlier export).
    assert hashlib.sha256(site_path(release["tarball"]).read_bytes()).hexdigest() == sha256
    again = last_json(lumberjack("ship", name, "--json"))
    assert again["condor_release"]["sent_bytes"] == 0

    launched = last_json(lumberjack("launch", name, "--json"))
    assert launched["phase"] == "launched" and launched["place"]["jobs"] == JOBS
    if in_allocation:  # no daemon on the login node: the pilot's first node runs the pool
        pool = launched["pool"]
        assert pool["started"] is False and pool["placement"] == "allocation"
    else:
        assert launched["pool"]["started"]
    release_dir = release["tarball"][: -len(".tar.gz")]
    shipped = {
        (info.st_dev, info.st_ino)
        for part in ("sbin", "libexec")
        for path in site_path(f"{release_dir}/{part}").rglob("*")
        if path.is_file() and not path.is_symlink()
        for info in [path.stat()]
    }

    seen: dict[int, tuple[str, os.stat_result, str]] = {}
    commands: dict[int, str] = {}

    def look(answer: dict) -> None:
        seen.update(daemons(remote_dir))
        commands.update(processes_of(remote_dir))

    look({})
    final = wait_finished(name, timeout=240, poll=3, on_status=look)
    assert final["jobs"] == {"completed": JOBS}

    # Proof: each daemon ran the shipped release's executable, not the site's /usr/sbin.
    programs = {program for program, _, _ in seen.values()}
    assert {"condor_master", "condor_schedd", "condor_startd"} <= programs, programs
    print(f"daemons seen: {sorted({(program, path) for program, _, path in seen.values()})}")
    outside = {pid: (program, path) for pid, (program, exe, path) in seen.items()
               if (exe.st_dev, exe.st_ino) not in shipped}  # fmt: skip
    assert outside == {}, f"daemons not run from {release_dir}: {outside}"
    assert not [cmd for cmd in commands.values() if "apptainer" in cmd or "squashfuse" in cmd]

    fetched = last_json(lumberjack("fetch", name, "--json"))
    assert fetched["phase"] == "fetched" and fetched["stop"]["stopped_schedd"]
    imported = last_json(lumberjack("import", name, "--json"))
    assert (imported["jobs"], imported["completed"], imported["handed_back_idle"]) == (
        JOBS, JOBS, 0,
    )  # fmt: skip

    after = tree(job_dir)
    expected = expected_outputs(job_dir, range(JOBS))
    assert {path for path in after if path not in before} == set(expected)
    assert {path: after[path] for path in expected} == expected

    cleaned = last_json(lumberjack("cleanup", name, "--json"))
    assert cleaned["phase"] == "cleaned" and not site_path(remote_dir).exists()
    assert _settles(name, remote_dir), site_leftovers(name, remote_dir)
    # The release stays for the next export of this site.
    assert site_path(f"{release_dir}/sbin/condor_master").is_file()


def _settles(name: str, remote_dir: str, timeout: float = 60) -> bool:
    """Slurm takes a moment to finish a cancelled pilot: leftovers gone within `timeout`."""
    deadline = time.monotonic() + timeout
    while site_leftovers(name, remote_dir):
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True
