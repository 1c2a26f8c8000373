"""An unfinished self-checkpointing job's checkpoint comes home into the local schedd's
spool directory for the job (checkpoint_home), on real files: the good case, what a
hostile site or a local user may put in the way, and a rerun after the local schedd
wrote a newer checkpoint.

A real bundle (export's write_bundle) for cluster 7: proc 0 comes back idle after some
checkpoints at the site, proc 1 completed. SPOOL here belongs to an account standing for
the schedd's (`daemon` when the tests run as root), the jobs to `nobody`.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lumberjack.ap import checkpoint_home, importer
from lumberjack.ap.export import Plan, write_bundle
from lumberjack.cli.import_cmd import _reported
from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw
from lumberjack.errors import BadInput

CLUSTER = 7
REMOTE = "/remote/spool"
ROOT = os.geteuid() == 0
OWNER = "nobody" if ROOT else pwd.getpwuid(os.geteuid()).pw_name
IDS = (pwd.getpwnam(OWNER).pw_uid, pwd.getpwnam(OWNER).pw_gid)
SCHEDD = pwd.getpwnam("daemon") if ROOT else pwd.getpwuid(os.geteuid())
JOB_SPOOL = "7/0/cluster7.proc0.subproc0"
needs_root = pytest.mark.skipif(not ROOT, reason="root acting for the schedd and the owner")


class World:
    """The bundle, the returned spool, the user's Iwd and the local SPOOL."""

    def __init__(self, tmp: Path, cluster_attrs: dict[str, str]) -> None:
        self.iwd = tmp / "home" / "counter"
        self.iwd.mkdir(parents=True)
        (self.iwd / "count.sh").write_text("#!/bin/sh\n")
        self.bundle = tmp / "bundle"
        native = self.bundle / "native"
        native.mkdir(parents=True)
        key = jql.cluster_key(CLUSTER)
        attrs = {
            "ClusterId": "7", "Owner": f'"{OWNER}"', "Cmd": json.dumps(f"{self.iwd}/count.sh"),
            "Iwd": json.dumps(str(self.iwd)), "Requirements": "true",
            "TransferOutput": '"count.txt,steps.txt"', **cluster_attrs,
        }  # fmt: skip
        ads = {
            "0.0": jql.Ad("0.0", "(empty)", "(empty)", {"NextClusterNum": "8"}),
            key: jql.Ad(key, "Job", "Machine", attrs),
        }
        for proc in (0, 1):
            ads[f"7.{proc}"] = jql.Ad(f"7.{proc}", "Job", "Machine", {
                "ProcId": str(proc), "JobStatus": "1", "Out": json.dumps(f"out.{proc}"),
                "Iwd": json.dumps(f"{REMOTE}/7/{proc}/cluster7.proc{proc}.subproc0"),
            })  # fmt: skip
        jqlw.write_log(native / "job_queue.log", ads)
        plan = Plan("counter", OWNER, [CLUSTER], ["7.0", "7.1"], self.bundle, REMOTE, 1, 10)
        write_bundle(plan, native / "job_queue.log", {"7.0": str(self.iwd), "7.1": str(self.iwd)},
                     site="testsite")  # fmt: skip
        self.returned = tmp / "returned"
        self.queue = jql.read_log(self.bundle / "spool" / "job_queue.log")
        self.queue["7.0"].set("NumJobStarts", "3")
        self.queue["7.1"].set("JobStatus", "4")
        self.queue["7.1"].set("ExitCode", "0")
        steps = "step 1\nstep 2\nstep 3\n"
        self.site_files(0, {"count.txt": "3\n", "steps.txt": steps, "_condor_stdout": "3 steps\n",
                            "scratch.tmp": "no checkpoint\n"})  # fmt: skip
        self.site_files(1, {"count.txt": "8\n", "steps.txt": "all\n"})
        self.work = tmp / "work"
        self.work.mkdir(mode=0o711)
        self.spool = tmp / "spool"  # the local schedd's SPOOL
        self.spool.mkdir(mode=0o755)
        os.chown(self.spool, SCHEDD.pw_uid, SCHEDD.pw_gid)
        if ROOT:
            for path in (self.iwd.parent, self.iwd, *self.iwd.iterdir()):
                os.chown(path, *IDS)

    def job_dir(self, proc: int) -> Path:
        return self.returned / "7" / str(proc) / f"cluster7.proc{proc}.subproc0"

    def site_files(self, proc: int, files: dict[str, str]) -> None:
        self.job_dir(proc).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (self.job_dir(proc) / name).parent.mkdir(parents=True, exist_ok=True)
            (self.job_dir(proc) / name).write_text(text)

    def run(self, **kw) -> importer.ImportReport:
        jqlw.write_log(self.returned / "job_queue.log", self.queue)
        return importer.run_import(None, self.bundle, self.returned, work_dir=self.work,
                                   local_spool=str(self.spool), **kw)  # fmt: skip

    @property
    def local(self) -> Path:
        """The local spool directory for job 7.0."""
        return self.spool / JOB_SPOOL

    def make_local(self, owner: tuple[int, int] = IDS) -> None:
        """The job's spool directory as the schedd makes it (levels the schedd's)."""
        self.local.mkdir(parents=True, mode=0o700)
        for level in (self.spool / "7", self.spool / "7" / "0"):
            level.chmod(0o755)
            os.chown(level, SCHEDD.pw_uid, SCHEDD.pw_gid)
        os.chown(self.local, *owner)

    def local_files(self) -> dict[str, str]:
        if not self.local.exists():
            return {}
        found = sorted(self.local.iterdir())
        return {p.name: p.read_text() if p.is_file() else "<dir>" for p in found}


@pytest.fixture
def make_world() -> Iterator:
    # Not under pytest's 0700 base: the owner and the "schedd" must reach their parts.
    base = Path(tempfile.mkdtemp(prefix="lj-ckpt-"))
    os.chmod(base, 0o755)
    umask = os.umask(0o022)  # the modes below as written, whatever an earlier test left
    count = 0

    def make(**cluster_attrs: str) -> World:
        nonlocal count
        count += 1
        (base / str(count)).mkdir(mode=0o755)
        return World(base / str(count), cluster_attrs)

    try:
        yield make
    finally:
        os.umask(umask)
        shutil.rmtree(base)


def checkpointing(make_world, files: str = '"count.txt, steps.txt"', **more: str) -> World:
    return make_world(TransferCheckpoint=files, **more)


# --- the good case ---------------------------------------------------------------------


def test_an_unfinished_job_resumes_from_its_site_checkpoint(make_world) -> None:
    world = checkpointing(make_world)
    report = world.run()
    assert (report.handed_back_idle, report.completed) == (1, 1), report.held
    assert report.resume_from_site == ["7.0"] and report.start_anew == {}
    # The checkpoint's files and the stdout so far; nothing else of the site's directory.
    assert world.local_files() == {"_condor_stdout": "3 steps\n", "count.txt": "3\n",
                                   "steps.txt": "step 1\nstep 2\nstep 3\n"}  # fmt: skip
    assert not (world.spool / "7" / "1").exists()  # the completed job: nothing
    # The schedd's layout: upper levels the schedd's 0755, the job's the owner's 0700.
    for level in (world.spool / "7", world.spool / "7" / "0"):
        info = level.stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (SCHEDD.pw_uid, 0o755)
    info = world.local.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (*IDS, 0o700)
    assert {p.stat().st_uid for p in world.local.iterdir()} == {IDS[0]}
    assert "1 unfinished job resumes from its site checkpoint: 7.0" in _reported(report.to_json())


def test_the_schedds_levels_are_open_to_the_owner_whatever_the_umask(make_world) -> None:
    world = checkpointing(make_world)
    old = os.umask(0o077)
    try:
        assert world.run().resume_from_site == ["7.0"]
    finally:
        os.umask(old)
    for level in (world.spool / "7", world.spool / "7" / "0"):
        assert stat.S_IMODE(level.stat().st_mode) == 0o755


def test_a_dry_run_names_the_job_and_writes_nothing(make_world) -> None:
    world = checkpointing(make_world)
    report = world.run(dry_run=True)
    assert report.resume_from_site == ["7.0"]
    assert list(world.spool.iterdir()) == []


def test_an_existing_job_spool_directory_of_the_owner_is_used(make_world) -> None:
    world = checkpointing(make_world)
    world.make_local()
    (world.local / "kept.dat").write_text("spooled input\n")
    assert world.run().resume_from_site == ["7.0"]
    assert world.local_files()["kept.dat"] == "spooled input\n"
    assert world.local_files()["count.txt"] == "3\n"


def test_a_checkpoint_directory_and_preserved_paths(make_world) -> None:
    world = checkpointing(make_world, '"state/, count.txt"')
    world.site_files(0, {"state/a/b.bin": "deep\n"})
    assert world.run().resume_from_site == ["7.0"]
    assert (world.local / "state" / "a" / "b.bin").read_text() == "deep\n"
    assert stat.S_IMODE((world.local / "state").stat().st_mode) == 0o700


# --- jobs that start anew ----------------------------------------------------------------


def test_a_job_without_transfer_checkpoint_starts_anew(make_world) -> None:
    world = make_world()
    report = world.run()
    assert report.resume_from_site == []
    why = "no transfer_checkpoint_files"
    assert report.start_anew == {"7.0": why}
    assert list(world.spool.iterdir()) == []
    assert not any("anew" in line for line in _reported(report.to_json()))  # no news


def test_a_job_whose_checkpoint_did_not_come_back_starts_anew(make_world) -> None:
    world = checkpointing(make_world, '"state.bin"')  # only stdout and scratch came back
    report = world.run()
    assert report.start_anew == {"7.0": "no checkpoint came back from the site"}
    assert list(world.spool.iterdir()) == []
    lines = _reported(report.to_json())
    assert "1 unfinished job starts anew (no checkpoint came back from the site): 7.0" in lines


def test_a_job_held_at_the_site_stays_held_with_its_checkpoint(make_world) -> None:
    world = checkpointing(make_world)
    world.queue["7.0"].set("JobStatus", "5")
    world.queue["7.0"].set("HoldReason", '"disk full"')
    report = world.run()
    assert report.held_at_site == ["7.0"] and report.resume_from_site == ["7.0"]
    assert world.local_files()["count.txt"] == "3\n"
    jqlw.write_log(world.returned / "job_queue.log", world.queue)
    _, merge, _ = importer.plan_import(world.bundle, world.returned)
    assert merge.ads["7.0"].get("JobStatus") == "5"  # released, it resumes; held until then


# --- a hostile site ----------------------------------------------------------------------


def test_a_symlink_in_the_returned_checkpoint_is_refused(make_world) -> None:
    world = checkpointing(make_world)
    (world.job_dir(0) / "steps.txt").unlink()
    (world.job_dir(0) / "steps.txt").symlink_to("/etc/shadow")
    with pytest.raises(BadInput, match="symbolic link"):
        world.run()
    assert list(world.spool.iterdir()) == []


def test_a_checkpoint_file_over_the_cap_is_refused(make_world, monkeypatch) -> None:
    world = checkpointing(make_world)
    world.site_files(0, {"count.txt": "9" * 4096})
    monkeypatch.setenv("LUMBERJACK_RETURN_MAX_JOB_BYTES", "1024")
    with pytest.raises(BadInput, match="exceed 1024 bytes"):
        world.run()
    assert list(world.spool.iterdir()) == []


def test_names_outside_the_job_directory_are_never_taken(make_world) -> None:
    # The entries are the user's, but a path leaving the spool directory must not lead
    # there: the spool keeps basenames, and a preserved path with ".." is no name at all.
    world = checkpointing(make_world, '"../../../escape.txt, /etc/abs.txt"',
                          PreserveRelativePaths="true")  # fmt: skip
    world.site_files(0, {"escape.txt": "x\n", "abs.txt": "y\n"})
    report = world.run()
    assert report.start_anew == {"7.0": "no checkpoint came back from the site"}
    assert list(world.spool.iterdir()) == []
    other = checkpointing(make_world, '"../../../escape.txt, /etc/abs.txt"')
    other.site_files(0, {"escape.txt": "x\n", "abs.txt": "y\n"})
    assert other.run().resume_from_site == ["7.0"]
    assert set(other.local_files()) == {"_condor_stdout", "abs.txt", "escape.txt"}
    assert sorted(p.name for p in other.spool.parent.iterdir()) == sorted(
        ["bundle", "home", "returned", "spool", "work"]
    )


# --- a local user in the way ---------------------------------------------------------------


@needs_root
def test_a_link_planted_as_the_job_spool_directory_is_not_followed(make_world) -> None:
    world = checkpointing(make_world)
    elsewhere = world.spool.parent / "elsewhere"
    elsewhere.mkdir()
    world.make_local()
    world.local.rmdir()
    world.local.symlink_to(elsewhere)
    report = world.run()
    assert report.resume_from_site == [] and "not a directory" in report.start_anew["7.0"]
    assert list(elsewhere.iterdir()) == []


@needs_root
def test_a_job_spool_directory_of_another_user_is_not_written(make_world) -> None:
    world = checkpointing(make_world)
    world.make_local(owner=(0, 0))  # root's, not the owner's
    report = world.run()
    assert report.start_anew["7.0"] == f"cannot write {world.local}: Permission denied"
    world.local.chmod(0o755)  # one the owner may read but not write
    world.work = world.work.parent / "work-again"
    world.work.mkdir(mode=0o711)
    report = world.run()
    assert report.start_anew["7.0"] == f"{world.local} is not the job owner's directory"
    assert world.local_files() == {}


def test_a_failed_copy_leaves_no_half_checkpoint(make_world) -> None:
    world = checkpointing(make_world)
    world.make_local()
    (world.local / "steps.txt").mkdir()  # in the way of the last file written
    os.chown(world.local / "steps.txt", *IDS)
    report = world.run()
    assert "directory is in the way" in report.start_anew["7.0"]
    assert world.local_files().keys() == {"steps.txt"}  # count.txt and stdout removed


# --- reruns --------------------------------------------------------------------------------


def test_a_rerun_never_overwrites_a_newer_local_checkpoint(make_world) -> None:
    world = checkpointing(make_world)
    world.run()
    # The local schedd ran the job on and checkpointed; then import runs again.
    (world.local / "count.txt").write_text("5\n")
    again = world.run()
    assert (world.local / "count.txt").read_text() == "5\n"
    assert again.files_placed == 0


def test_checkpoint_plan_reads_the_access_points_attribute_only(make_world) -> None:
    world = checkpointing(make_world)
    world.queue[jql.cluster_key(CLUSTER)].set("TransferCheckpoint", '"scratch.tmp"')
    jqlw.write_log(world.returned / "job_queue.log", world.queue)
    _, _, plans = importer.plan_import(world.bundle, world.returned)
    (plan,) = [p for p in plans if p.paths.job_id == "7.0"]
    assert isinstance(plan.checkpoint, checkpoint_home.Checkpoint)
    assert plan.checkpoint.files == ["_condor_stdout", "count.txt", "steps.txt"]
    assert plan.checkpoint.job_dir == JOB_SPOOL
