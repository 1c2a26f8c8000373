"""Root runs lumberjack for a submitter (as a facility's cron does, with root's own
credentials at the schedd) and the submitter is hostile: each attack of the security
review, against the testbed's real schedd, site and Slurm.

One journey to the testbed site carries three clusters of alice's: an ordinary one, one
whose output remap points into a root-owned directory, one whose initialdir is a root-
owned directory. While it runs, alice plants in her bundle what root used to follow: an
import-state/merge link to a root directory, and a returned/ tree of her own with a link
to a root-only file. Every test below reads one outcome of that journey.
"""

from __future__ import annotations

import os
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import testbed
from journey import (
    SITE_BASE,
    chown_tree,
    history,
    last_json,
    lumberjack,
    make_job_dir,
    query,
    submit,
    tree,
)

pytestmark = pytest.mark.integration
SECRET = "root-only secret, never alice's\n"


class Journey:
    def __init__(self, base: Path, state: Path) -> None:
        self.base, self.state = base, state
        self.root_dir = base / "root-owned"  # root's, 0755: alice may read, not write
        self.victim = self.root_dir / "victim.conf"
        self.planted_target = base / "root-planted-target"
        self.secret = base / "root-only-secret"
        self.name = f"rootacts-{uuid.uuid4().hex[:6]}"
        self.results: dict = {}


def _root_tree(journey: Journey) -> None:
    journey.root_dir.mkdir(mode=0o755)
    journey.victim.write_text("root's config\n")
    os.chmod(journey.victim, 0o644)
    # initialdir of cluster C: root's, with inputs alice may read
    iwd = journey.root_dir / "job"
    (iwd / "sub").mkdir(parents=True)
    (iwd / "run.sh").write_text((journey.base / "job" / "run.sh").read_text())
    (iwd / "run.sh").chmod(0o755)
    (iwd / "in put.txt").write_text("root's input\n")
    (iwd / "sub" / "data.txt").write_text("data\n")
    for path in (iwd, iwd / "sub"):
        os.chmod(path, 0o755)
    journey.planted_target.mkdir(mode=0o750)
    (journey.planted_target / "keep").write_text("root's\n")
    journey.secret.write_text(SECRET)
    os.chmod(journey.secret, 0o600)


def _plant(journey: Journey, bundle: Path) -> None:
    """What alice does to her own bundle once it exists (as her: lchown'd)."""
    state = bundle / "import-state"
    state.mkdir()
    (state / "merge").symlink_to(journey.planted_target)
    returned = bundle / "returned"
    job = returned / "sneaky"
    job.mkdir(parents=True)
    (job / "_condor_stdout").symlink_to(journey.secret)
    (returned / "job_queue.log").write_text("")
    chown_tree(state)
    chown_tree(returned)


def as_root(env: dict[str, str], *args: str, check: bool = True):  # noqa: ANN201
    """The CLI as a facility's cron runs it: root, with root's credentials at the schedd.
    Only in its own process: this one stays alice's (a process keeps the security
    session it opened with the schedd, whoever a later call names)."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "lumberjack", *args], capture_output=True,
                            text=True, env={**os.environ, **env})  # fmt: skip
    if check:
        assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


@pytest.fixture(scope="module")
def done(access_point: testbed.Pool, site) -> Iterator[Journey]:  # noqa: ANN001
    base = testbed.testbed_dir() / "work" / f"rootacts-{os.getpid()}"
    base.mkdir(parents=True, mode=0o755)
    os.chown(base, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    state = testbed.root_state_dir(base.name)
    journey = Journey(base, state)
    job_dir = make_job_dir(base)
    _root_tree(journey)
    # alice submits with her own credentials ...
    ordinary = submit(job_dir, 1)
    remap = submit(job_dir, 1, transfer_output_remaps=f'"renamed.txt = {journey.victim}"')
    in_root_dir = submit(job_dir, 1, initialdir=str(journey.root_dir / "job"),
                         executable=str(journey.root_dir / "job" / "run.sh"),
                         log=str(base / "c.log"))  # fmt: skip
    # ... root runs lumberjack with root's own (a queue superuser, as cron has)
    env = {**access_point.client_env_as(testbed.rootfs_path(), "root"),
           "LUMBERJACK_STATE_DIR": str(state)}  # fmt: skip
    journey.results.update(job_dir=job_dir, clusters=(ordinary, remap, in_root_dir))
    journey.results["before"] = tree(job_dir)
    try:
        as_root(env, "export", "--ids", str(ordinary), str(remap), str(in_root_dir),
                "--site", "testbed", "--name", journey.name, "--walltime", "20m")  # fmt: skip
        _plant(journey, state / "bundles" / journey.name)
        deadline = time.monotonic() + 420
        while True:
            entry = last_json(as_root(env, "exports", "--json"))["exports"][0]
            if entry["phase"] == "imported":
                break
            assert entry["phase"] not in ("failed", "unexported"), entry
            assert time.monotonic() < deadline, entry
            as_root(env, "sync", "--name", journey.name, "--json", check=False)
            time.sleep(2)
        journey.results["import"] = last_json(as_root(env, "import", journey.name, "--json"))
        yield journey
    finally:
        as_root(env, "cleanup", journey.name, check=False)
        from journey import stop_at_site

        stop_at_site(journey.name, f"{SITE_BASE}/{journey.name}")


def _held(cluster: int) -> dict:
    ads = query(f"ClusterId == {cluster}", ["JobStatus", "HoldReason", "HoldReasonCode"])
    assert len(ads) == 1, ads
    return ads[0]


def test_root_credentials_carry_the_whole_journey(done: Journey) -> None:
    ordinary = done.results["clusters"][0]
    ads = history(ordinary, ["ProcId", "JobStatus", "Owner", "Managed"], expect=1)
    assert ads[0]["JobStatus"] == 4 and ads[0]["Owner"] == "alice" and "Managed" not in ads[0]
    job_dir = done.results["job_dir"]
    assert (job_dir / "out.0").read_text() == "stdout of job 0\n"
    assert os.stat(job_dir / "out.0").st_uid == testbed.SUBMITTER_UID


def test_a_remap_into_a_root_directory_holds_the_job_and_writes_nothing(done: Journey) -> None:
    remap = done.results["clusters"][1]
    ad = _held(remap)
    assert ad["JobStatus"] == 5 and ad["HoldReasonCode"] == 12
    assert ad["HoldReason"] == f"cannot write {done.victim} as alice: Permission denied"
    assert done.victim.read_text() == "root's config\n"
    info = os.stat(done.victim)
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o644)
    assert sorted(p.name for p in done.root_dir.iterdir()) == ["job", "victim.conf"]
    assert f"{remap}.0" in done.results["import"]["held"]
    # ... and its user log says so, as HTCondor's would (DAGMan reads it)
    log = (done.results["job_dir"] / "job.log").read_text()
    held = f"{remap:03d}.000.000"
    assert f") {ad['HoldReason']}" not in log  # the reason is on its own line
    assert f"\t{ad['HoldReason']}\n\tCode 12 Subcode 13\n" in log
    assert f"012 ({held})" in log and f"005 ({held})" not in log


def test_an_initialdir_in_a_root_directory_holds_the_job(done: Journey) -> None:
    cluster = done.results["clusters"][2]
    ad = _held(cluster)
    assert ad["JobStatus"] == 5
    assert ad["HoldReason"].startswith(f"cannot write {done.root_dir / 'job'}/")
    assert ad["HoldReason"].endswith(" as alice: Permission denied")
    assert sorted(p.name for p in (done.root_dir / "job").iterdir()) == [
        "in put.txt", "run.sh", "sub"
    ]  # fmt: skip


def test_a_planted_import_state_link_is_never_followed(done: Journey) -> None:
    info = os.stat(done.planted_target)
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, 0, 0o750)
    assert [p.name for p in done.planted_target.iterdir()] == ["keep"]
    bundle_state = done.state / "bundles" / done.name / "import-state"
    assert (bundle_state / "merge").is_symlink()  # alice's, left as she made it


def test_a_returned_tree_planted_in_the_bundle_is_never_read(done: Journey) -> None:
    found = [
        path for path in done.base.rglob("*")
        if path.is_file() and not path.is_symlink() and path != done.secret
        and path.read_bytes() == SECRET.encode()
    ]  # fmt: skip
    assert found == []
    job_dir = done.results["job_dir"]
    after = tree(job_dir)
    new = {path for path in after if path not in done.results["before"]}
    assert new <= {"out.0", "err.0", "result.txt", "results/renamed-0.txt", "job.log", "c.log"}


def test_roots_working_state_is_roots_at_every_level(done: Journey) -> None:
    returned = done.state / "work" / done.name / "returned"
    for level in (done.state, done.state / "work", done.state / "work" / done.name, returned):
        info = os.lstat(level)
        assert stat.S_ISDIR(info.st_mode) and info.st_uid == 0, level
        assert not info.st_mode & 0o022, level
    assert stat.S_IMODE(os.lstat(returned).st_mode) == 0o700
    assert (returned / "job_queue.log").exists()


@pytest.mark.parametrize("swap", ["an input", "the manifest"])
def test_ship_never_sends_a_root_file_swapped_into_the_bundle(
    workspace: Path, state_dir: Path, at_site: list, swap: str
) -> None:
    """alice swaps a file of her exported bundle for a link to a root-only file of the
    same size: root's ship reads the bundle as alice, so it refuses in one line and the
    file's bytes never reach the site."""
    from journey import site_path

    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 1)
    name = f"swap-{uuid.uuid4().hex[:6]}"
    lumberjack("export", "--ids", str(cluster), "--site", "testbed", "--name", name)
    at_site.append(name)
    bundle = state_dir / "bundles" / name
    victim = bundle / ("manifest.json" if swap == "the manifest" else "spool/lumberjack-inputs")
    if swap == "an input":
        victim = next(p for p in victim.rglob("*") if p.is_file())
    secret = workspace.parent / f"root-only-{uuid.uuid4().hex[:6]}"
    secret.write_bytes(b"S" * victim.stat().st_size)
    os.chmod(secret, 0o600)
    try:
        victim.unlink()
        victim.symlink_to(secret)
        os.lchown(victim, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
        result = lumberjack("ship", name, check=False)
        assert result.returncode != 0
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        remote = site_path(f"{SITE_BASE}/{name}")
        sent = [p for p in remote.rglob("*") if p.is_file() and b"SSSS" in p.read_bytes()]
        assert sent == []
        assert last_json(lumberjack("exports", "--json"))["exports"][0]["phase"] == "exported"
    finally:
        secret.unlink()
        lumberjack("unexport", name, check=False)
