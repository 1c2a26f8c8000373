"""What a hostile site (or a local user racing root) sends back: each case on real files.

A real bundle is written by export's own write_bundle from a native log; the "site"
then returns a spool; import must take only results, place only the job's own files,
append only the job's own events, and never write through a link.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pwd
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lumberjack.ap import import_queues, importer, output_writer, result_attrs, results, userlog
from lumberjack.ap.bundle import MANIFEST
from lumberjack.ap.export import Plan, write_bundle
from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw
from lumberjack.core import returns
from lumberjack.core.jobstatus import JobStatus
from lumberjack.errors import BadInput

CLUSTER = 7
SPOOL = "/remote/spool"
ROOT = os.geteuid() == 0
OWNER = "nobody" if ROOT else pwd.getpwuid(os.geteuid()).pw_name
IDS = (pwd.getpwnam(OWNER).pw_uid, pwd.getpwnam(OWNER).pw_gid)
needs_root = pytest.mark.skipif(not ROOT, reason="root acting for a user")


def event(code: int, job: str, text: str = "Job event") -> bytes:
    return f"{code:03d} ({job}.000) 2025-01-02 03:04:05 {text}\n\tdetail\n...\n".encode()


class World:
    """A bundle for cluster 7 (two procs), the returned spool, and the user's Iwd."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.iwd = tmp / "home" / "calib"
        self.iwd.mkdir(parents=True)
        (self.iwd / "run.sh").write_text("#!/bin/sh\n")
        self.bundle = tmp / "bundle"
        native = self.bundle / "native"
        native.mkdir(parents=True)
        cluster = jql.cluster_key(CLUSTER)
        ads = {
            "0.0": jql.Ad("0.0", "(empty)", "(empty)", {"NextClusterNum": "8"}),
            cluster: jql.Ad(cluster, "Job", "Machine", {
                "ClusterId": "7", "Owner": f'"{OWNER}"', "Cmd": json.dumps(f"{self.iwd}/run.sh"),
                "Iwd": json.dumps(str(self.iwd)), "UserLog": '"job.log"',
                "Arguments": '"safe"', "Requirements": "true",
            }),
        }  # fmt: skip
        for proc in (0, 1):
            key = f"{CLUSTER}.{proc}"
            ads[key] = jql.Ad(key, "Job", "Machine", {
                "ProcId": str(proc), "JobStatus": "1",
                "Iwd": json.dumps(f"{SPOOL}/7/{proc}/cluster7.proc{proc}.subproc0"),
                "Out": json.dumps(f"out.{proc}"), "Err": json.dumps(f"err.{proc}"),
            })  # fmt: skip
        jqlw.write_log(native / "job_queue.log", ads)
        plan = Plan("calib", OWNER, [CLUSTER], ["7.0", "7.1"], self.bundle, SPOOL, 1, 10)
        iwds = {"7.0": str(self.iwd), "7.1": str(self.iwd)}
        write_bundle(plan, native / "job_queue.log", iwds, site="testsite")
        self.returned = self.bundle / "returned"
        self.returned.mkdir()
        self.queue = jql.read_log(self.bundle / "spool" / "job_queue.log")
        self.queue["7.0"].set("JobStatus", "4")
        self.queue["7.0"].set("ExitCode", "0")
        self.queue["7.0"].set("RemoteWallClockTime", "12.0")
        self.queue["7.1"].set("JobStatus", "2")
        self.queue["7.1"].set("NumJobStarts", "1")
        for proc in (0, 1):
            d = self.job_dir(proc)
            d.mkdir(parents=True)
            (d / "_condor_stdout").write_text(f"out {proc}\n")
        (self.job_dir(0) / "lumberjack-user.log").write_bytes(
            event(1, "007.000") + event(5, "007.000", "Job terminated.")
        )
        (self.iwd / "job.log").write_bytes(event(0, "007.000", "Job submitted"))
        self.work = tmp / "work"  # the importing account's own state
        self.work.mkdir(mode=0o711)
        if ROOT:  # the user's side is the owner's: import acts there as the owner
            for path in (self.iwd.parent, self.iwd, *self.iwd.iterdir()):
                os.chown(path, *IDS)

    def job_dir(self, proc: int) -> Path:
        return self.returned / "7" / str(proc) / f"cluster7.proc{proc}.subproc0"

    def save(self) -> None:
        jqlw.write_log(self.returned / "job_queue.log", self.queue)

    def run(self, **kw):
        self.save()
        return importer.run_import(None, self.bundle, self.returned, work_dir=self.work, **kw)

    def plan(self):
        self.save()
        return importer.plan_import(self.bundle, self.returned)

    def iwd_state(self) -> dict[str, bytes]:
        return {
            str(p.relative_to(self.iwd)): p.read_bytes()
            for p in sorted(self.iwd.rglob("*"))
            if p.is_file() and not p.is_symlink()
        }


@pytest.fixture
def world() -> Iterator[World]:
    # Not under pytest's 0700 base: the owner import acts as must reach the Iwd.
    base = Path(tempfile.mkdtemp(prefix="lj-hostile-"))
    os.chmod(base, 0o755)
    try:
        yield World(base)
    finally:
        shutil.rmtree(base)


def refused(world: World, match: str) -> None:
    """Import refuses with one line naming the problem, and the Iwd is untouched."""
    before = world.iwd_state()
    with pytest.raises(BadInput, match=match) as exc:
        world.run()
    assert "\n" not in str(exc.value)
    assert world.iwd_state() == before


# --- the good case, for reference -----------------------------------------------------


def test_ordinary_results_are_imported(world: World) -> None:
    report = world.run()
    assert (report.completed, report.handed_back_idle) == (1, 1)
    assert (world.iwd / "out.0").read_text() == "out 0\n"
    log = (world.iwd / "job.log").read_bytes()
    assert log == event(0, "007.000", "Job submitted") + event(1, "007.000") + event(
        5, "007.000", "Job terminated."
    )
    assert report.site_changes == {} and report.not_sent == []
    if ROOT:
        assert (world.iwd / "out.0").stat().st_uid == IDS[0]


def test_result_attribute_list_is_one_table() -> None:
    assert set(results.RESULT_ATTRS) == set(result_attrs.RESULTS)
    assert set(results.IDLE_RESULT_ATTRS) <= set(results.RESULT_ATTRS)
    dangerous = "Cmd Arguments Environment Requirements PreCmd Iwd TransferOutput Owner User"
    for name in dangerous.split() + ["TransferOutputRemaps", "UserLog"]:
        assert not results.is_result(name)


# --- 1. import takes only results -------------------------------------------------------


def test_site_changes_outside_results_are_reported_not_merged(world: World) -> None:
    ad = world.queue["7.1"]
    ad.set("Arguments", '"rm -rf ~"')
    ad.set("PreCmd", '"/bin/evil"')
    ad.set("Environment", '"LD_PRELOAD=/tmp/x.so"')
    ad.delete("Out")
    ad.set("Err", '"/etc/cron.d/x"')
    _, merge, _ = world.plan()
    ours = merge.ads["7.1"]
    assert ours.get("Arguments") is None and ours.get("PreCmd") is None
    assert ours.get("Environment") is None and ours.get("Out") == '"out.1"'
    assert ours.get("JobStatus") == "1" and ours.get("NumJobStarts") == "1"
    assert ours.get("Err") == '"err.1"'
    assert merge.site_changes["7.1"]["changed"] == ["Err"]
    assert sorted(merge.site_changes["7.1"]["added"]) == ["Arguments", "Environment", "PreCmd"]
    assert merge.site_changes["7.1"]["removed"] == ["Out"]


def test_idle_job_is_the_job_as_it_left_plus_counters(world: World) -> None:
    world.queue["7.1"].set("ExitCode", "3")
    world.queue["7.1"].set("Cmd", '"/bin/evil"')
    _, merge, _ = world.plan()
    original = importer.original_ad(
        import_queues.sent_queue(world.bundle, importer.load_checked_manifest(world.bundle, None))[
            "7.1"
        ],
        importer.PathMap.from_json(
            json.loads((world.bundle / MANIFEST).read_text())["path_map"]
        ).jobs["7.1"],
    )
    expected = dict(original.attrs, NumJobStarts="1")
    assert merge.ads["7.1"].attrs == expected


def test_cluster_ad_changes_are_never_merged(world: World) -> None:
    world.queue[jql.cluster_key(CLUSTER)].set("Requirements", "false")
    world.queue[jql.cluster_key(CLUSTER)].set("Arguments", '"evil"')
    _, merge, _ = world.plan()
    assert merge.ads[jql.cluster_key(CLUSTER)].get("Arguments") == '"safe"'
    assert merge.site_changes[jql.cluster_key(CLUSTER)]["changed"] == ["Arguments", "Requirements"]


def test_result_with_an_expression_is_refused(world: World) -> None:
    world.queue["7.0"].set("ExitCode", "Cmd")
    _, merge, _ = world.plan()
    assert merge.ads["7.0"].get("ExitCode") is None
    assert merge.site_changes["7.0"]["refused"] == ["ExitCode"]


def test_other_owner_never_reaches_the_queue(world: World) -> None:
    world.queue["7.0"].set("Owner", '"root"')
    world.queue[jql.cluster_key(CLUSTER)].set("Owner", '"root"')
    _, merge, _ = world.plan()
    assert merge.ads[jql.cluster_key(CLUSTER)].get("Owner") == f'"{OWNER}"'
    assert merge.ads["7.0"].get("Owner") is None


def test_injected_job_is_reported_and_the_rest_imported(world: World) -> None:
    world.queue["999.0"] = jql.Ad("999.0", "Job", "Machine", {"Owner": '"root"'})
    world.queue["0999.-1"] = jql.Ad("0999.-1", "Job", "Machine", {"Cmd": '"/bin/evil"'})
    report = world.run()
    assert sorted(report.not_sent) == ["0999.-1", "999.0"]
    assert report.completed == 1 and (world.iwd / "out.0").exists()


def test_site_schedds_user_record_is_ignored_without_a_word(world: World) -> None:
    world.queue["0.2"] = jql.Ad("0.2", "User", "", {"Owner": '"hpcuser"'})
    report = world.run()
    assert report.not_sent == [] and report.completed == 1


def test_extra_proc_of_our_cluster_is_reported(world: World) -> None:
    world.queue["7.5"] = jql.Ad("7.5", "Job", "Machine", {"JobStatus": "1"})
    _, merge, _ = world.plan()
    assert merge.not_sent == ["7.5"] and "7.5" not in merge.ads


def test_job_removed_at_the_site_is_reported_missing(world: World) -> None:
    del world.queue["7.1"]
    report = world.run()
    assert report.missing == ["7.1"] and report.jobs == 1


def test_torn_transaction_is_dropped(world: World) -> None:
    world.save()
    with open(world.returned / "job_queue.log", "a") as log:
        log.write("105 \n103 7.1 JobStatus 4\n103 7.1 ExitCode 0\n")
    _, merge, _ = importer.plan_import(world.bundle, world.returned)
    assert merge.ads["7.1"].get("JobStatus") == "1" and merge.ads["7.1"].get("ExitCode") is None


def test_millions_of_records_are_refused_before_parsing(world: World) -> None:
    world.save()
    with open(world.returned / "job_queue.log", "a") as log:
        log.write("103 7.1 NumJobStarts 1\n" * 1_000_000)
    with pytest.raises(BadInput, match="refusing to read it"):
        importer.plan_import(world.bundle, world.returned)


def test_corrupt_queue_is_refused(world: World) -> None:
    world.save()
    with open(world.returned / "job_queue.log", "a") as log:
        log.write("not a record\n")
    refused_plan(world, "corrupt")


def refused_plan(world: World, match: str) -> None:
    before = world.iwd_state()
    with pytest.raises(BadInput, match=match) as exc:
        importer.run_import(None, world.bundle, world.returned, work_dir=world.work)
    assert "\n" not in str(exc.value)
    assert world.iwd_state() == before


def test_queue_that_is_a_symlink_is_refused(world: World) -> None:
    (world.returned / "job_queue.log").symlink_to(world.bundle / "spool" / "job_queue.log")
    refused_plan(world, "not a regular file")


def test_manifest_changed_after_export_is_refused(world: World) -> None:
    digest = importer.manifest_digest(world.bundle)
    data = json.loads((world.bundle / MANIFEST).read_text())
    data["path_map"]["jobs"]["7.0"]["local_iwd"] = "/etc"
    (world.bundle / MANIFEST).write_text(json.dumps(data))
    world.save()
    with pytest.raises(BadInput, match="changed after export"):
        importer.run_import(
            None, world.bundle, world.returned, work_dir=world.work, manifest_sha256=digest
        )
    assert not Path("/etc/out.0").exists()


def test_unchanged_manifest_passes_the_digest_check(world: World) -> None:
    world.run(manifest_sha256=importer.manifest_digest(world.bundle))
    assert (world.iwd / "out.0").exists()


def test_sent_queue_changed_in_the_bundle_is_rebuilt_from_the_native_log(world: World) -> None:
    spool_log = world.bundle / "spool" / "job_queue.log"
    ads = jql.read_log(spool_log)
    ads[jql.cluster_key(CLUSTER)].set("Arguments", '"evil"')
    jqlw.write_log(spool_log, ads)
    _, merge, _ = world.plan()
    assert merge.ads[jql.cluster_key(CLUSTER)].get("Arguments") == '"safe"'


def test_sent_queue_read_once_counts_what_writing_it_again_would(world: World) -> None:
    """The returned queue's bounds come from the sent log as read (bytes, records),
    the same as from writing the sent queue again; a rebuilt queue is written again."""
    manifest = importer.bundle_mod.load_manifest(world.bundle)
    sent, size = import_queues.read_sent_queue(world.bundle, manifest)
    assert sent is not None and size == importer._log_size(sent)
    (world.bundle / "spool" / "job_queue.log").write_text("")
    sent, size = import_queues.read_sent_queue(world.bundle, manifest)
    assert sent is not None and size is None


def test_without_any_copy_of_the_sent_queue_import_refuses(world: World) -> None:
    (world.bundle / "native" / "job_queue.log").unlink()
    (world.bundle / "spool" / "job_queue.log").write_text("")
    world.save()
    refused_plan(world, "no intact copy")


# --- 3. hostile files -----------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["bad\nname", "esc\x1b[31m", "tab\there", "del\x7f"],
    ids=["newline", "escape", "tab", "del"],
)
def test_control_characters_in_names_are_refused(world: World, name: str) -> None:
    (world.job_dir(0) / name).write_text("x")
    refused(world, "control character")


def test_name_longer_than_name_max_is_refused() -> None:
    with pytest.raises(BadInput, match="too long"):
        importer.check_returned_name("a" * 256, "7.0")


def test_path_longer_than_path_max_is_refused(world: World) -> None:
    fd = os.open(world.job_dir(0), os.O_RDONLY)
    try:
        for _ in range(25):  # 25 x 200 bytes: deeper than PATH_MAX
            os.mkdir("d" * 200, dir_fd=fd)
            new = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = new
        os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    refused(world, "too long")


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "a/../../b"])
def test_dotdot_and_absolute_names_are_refused(world: World, name: str) -> None:
    world.queue["7.0"].set("TransferOutput", json.dumps(name))
    _, merge, plans = world.plan()  # the site's TransferOutput is never used
    assert merge.site_changes["7.0"]["added"] == ["TransferOutput"]
    assert all(not p.dest.startswith("/etc") for plan in plans for p in plan.placements)


def test_symlink_to_root_file_is_refused(world: World) -> None:
    secret = world.tmp / "secret"
    secret.write_text("root only")
    (world.job_dir(0) / "out.txt").symlink_to(secret)
    refused(world, "symbolic link")


def test_directory_symlink_is_refused(world: World) -> None:
    (world.job_dir(0) / "results").symlink_to("/etc")
    refused(world, "symbolic link")


def test_hard_link_to_a_file_outside_is_refused(world: World) -> None:
    secret = world.bundle / "secret"
    secret.write_text("root only")
    os.link(secret, world.job_dir(0) / "out.txt")
    refused(world, "hard links")


def test_fifo_is_refused(world: World) -> None:
    os.mkfifo(world.job_dir(0) / "pipe")
    refused(world, "is a FIFO")


def test_socket_is_refused(world: World) -> None:
    sock = socket.socket(socket.AF_UNIX)
    try:
        os.chdir(world.job_dir(0))
        sock.bind("sock")
        refused(world, "is a socket")
    finally:
        sock.close()
        os.chdir("/")


@needs_root
def test_device_is_refused(world: World) -> None:
    os.mknod(world.job_dir(0) / "null", 0o600 | 0o020000, os.makedev(1, 3))
    refused(world, "is a device")


def test_file_far_larger_than_the_job_could_write_is_refused(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(returns.MAX_JOB_BYTES_ENV, "1000")
    with open(world.job_dir(0) / "huge", "wb") as f:
        f.truncate(10_000)  # sparse: large on paper, cheap on disk
    refused(world, "exceed 1000 bytes")


def test_total_size_cap(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(returns.MAX_TOTAL_BYTES_ENV, "10")
    (world.job_dir(1) / "big").write_bytes(b"x" * 8)
    refused(world, "in total")


def test_too_many_files_cap(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(returns.MAX_JOB_FILES_ENV, "3")
    for i in range(5):
        (world.job_dir(0) / f"f{i}").write_text("x")
    refused(world, "more than 3 returned files")


def test_bad_cap_setting_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(returns.MAX_JOB_BYTES_ENV, "lots")
    with pytest.raises(BadInput, match="not a number"):
        returns.Limits.from_env(BadInput)


def test_setuid_bit_from_the_site_is_not_kept(world: World) -> None:
    (world.job_dir(0) / "tool").write_text("#!/bin/sh\n")
    os.chmod(world.job_dir(0) / "tool", 0o4755)
    old = os.umask(0o022)  # another test (the agent in-process) may have left 077
    try:
        world.run()
    finally:
        os.umask(old)
    assert (world.iwd / "tool").stat().st_mode & 0o7777 == 0o755


# --- 2. events ------------------------------------------------------------------------


def test_events_of_other_jobs_truncated_and_garbage_are_dropped(world: World) -> None:
    good = event(1, "007.000") + event(6, "007.000", "Image size")
    data = (
        b"garbage line\n" + good[: len(event(1, "007.000"))] + event(5, "003.000", "forged")
        + b"005 (007.000.000) 2025-01-02 03:04:05 Job terminated.\n\tno end\n"
        + event(6, "007.000", "Image size") + event(5, "007.001") + b"\x00\x01binary\n"
        + b"001 (007.000.000) 2025-01-02 03:04:05 cut off"
    )  # fmt: skip
    got = userlog.filter_events(data, 7, 0, None)
    assert got.data == good
    assert got.dropped == {"garbage": 2, "other job": 2, "truncated": 2}


def test_forged_terminate_for_a_job_that_did_not_finish_is_dropped(world: World) -> None:
    (world.job_dir(1) / "lumberjack-user.log").write_bytes(
        event(1, "007.001") + event(5, "007.001", "Job terminated.")
    )
    report = world.run()
    assert report.events["7.1"] == {"kept": 1, "dropped": {"contradicts the job's status": 1}}
    assert (
        b"007.001.000) 2025-01-02 03:04:05 Job terminated"
        not in (world.iwd / "job.log").read_bytes()
    )


def test_the_sites_abort_event_is_left_to_the_local_schedd() -> None:
    """A job removed at the site comes home removed; the local schedd writes its aborted
    event (with the site's RemoveReason) when the job leaves its queue, as HTCondor
    writes one at home: the site's copy would make it two."""
    removed = event(1, "007.000") + event(9, "007.000", "Job was aborted.")
    got = userlog.filter_events(removed, 7, 0, JobStatus.REMOVED)
    assert got.data == event(1, "007.000")
    assert got.dropped == {"written by the local schedd": 1}


def test_event_with_control_characters_is_dropped() -> None:
    got = userlog.filter_events(event(1, "007.000", "a\x1b]0;pwned\x07"), 7, 0, None)
    assert got.kept == 0 and got.dropped == {"control characters": 1}


def test_a_crash_between_append_and_record_appends_nothing_twice(world: World) -> None:
    def crash() -> None:
        raise KeyboardInterrupt("killed")

    before = (world.iwd / "job.log").read_bytes()
    with pytest.raises(KeyboardInterrupt):
        world.run(after_append=crash)
    world.run()
    world.run()
    log = (world.iwd / "job.log").read_bytes()
    assert log == before + event(1, "007.000") + event(5, "007.000", "Job terminated.")


def test_a_crash_before_the_append_appends_on_rerun(world: World, tmp_path: Path) -> None:
    log = tmp_path / "u.log"
    log.write_bytes(b"")
    journal = tmp_path / "j.json"
    fd = os.open(log, os.O_RDWR | os.O_APPEND)
    try:
        userlog._write_journal(journal, {"offset": 0, "length": 3, "sha256": "x"})
        assert userlog.append_once(fd, b"abc", journal) == 3
        assert userlog.append_once(fd, b"abc", journal) == 0
        # a cut-short append is finished, not repeated
        os.write(fd, b"de")
        journal2 = tmp_path / "j2.json"
        userlog._write_journal(
            journal2,
            {"offset": 3, "length": 4, "sha256": __import__("hashlib").sha256(b"defg").hexdigest()},
        )
        assert userlog.append_once(fd, b"defg", journal2) == 2
    finally:
        os.close(fd)
    assert log.read_bytes() == b"abcdefg"


# --- 4. root writes as the user, never through the user's links ---------------------------


def root_file(world: World) -> Path:
    target = world.tmp / "etc-shadow"
    target.write_text("root:secret\n")
    os.chmod(target, 0o600)
    return target


def test_symlink_at_the_temporary_name_is_not_written_through(world: World) -> None:
    target = root_file(world)
    (world.iwd / ".out.0.lumberjack-part").symlink_to(target)
    world.run()
    assert target.read_text() == "root:secret\n" and target.stat().st_uid == os.geteuid()
    assert (world.iwd / "out.0").read_text() == "out 0\n"


def test_symlink_at_the_output_name_is_replaced_not_followed(world: World) -> None:
    target = root_file(world)
    (world.iwd / "out.0").symlink_to(target)
    world.run()
    assert target.read_text() == "root:secret\n"
    assert not (world.iwd / "out.0").is_symlink()


def held_with_nothing_placed(world: World, job: str, reason: str) -> importer.ImportReport:
    """The job comes home held with the reason; none of its outputs is placed."""
    before = world.iwd_state()
    report = world.run()
    assert job in report.held and re.search(reason, report.held[job]), report.held
    assert not (world.iwd / f"out.{job[-1]}").exists()
    assert {k: v for k, v in world.iwd_state().items() if k.endswith(f".{job[-1]}")} == {
        k: v for k, v in before.items() if k.endswith(f".{job[-1]}")
    }
    return report


def test_symlinked_user_log_holds_the_job(world: World) -> None:
    target = root_file(world)
    (world.iwd / "job.log").unlink()
    (world.iwd / "job.log").symlink_to(target)
    report = held_with_nothing_placed(world, "7.0", "symbolic link|Permission denied")
    assert "7.1" not in report.held
    assert target.read_text() == "root:secret\n" and target.stat().st_uid == os.geteuid()


def test_hard_linked_user_log_holds_the_job(world: World) -> None:
    target = root_file(world)
    (world.iwd / "job.log").unlink()
    os.link(target, world.iwd / "job.log")
    held_with_nothing_placed(world, "7.0", "hard links|not owned|Permission denied")
    assert target.read_text() == "root:secret\n"


def test_fifo_as_user_log_does_not_hang_and_holds_the_job(world: World) -> None:
    (world.iwd / "job.log").unlink()
    os.mkfifo(world.iwd / "job.log", 0o600)
    if ROOT:
        os.chown(world.iwd / "job.log", *IDS)
    held_with_nothing_placed(world, "7.0", "FIFO|not a regular file")


@needs_root
def test_output_directory_the_user_linked_elsewhere_is_written_only_as_the_user(
    world: World,
) -> None:
    elsewhere = world.tmp / "rootdir"
    elsewhere.mkdir()
    data = json.loads((world.bundle / MANIFEST).read_text())
    sub = world.iwd / "sub"
    for job in data["path_map"]["jobs"].values():
        job["out"] = str(sub / f"o.{job['proc']}")
    (world.bundle / MANIFEST).write_text(json.dumps(data))
    sub.symlink_to(elsewhere)
    os.lchown(sub, *IDS)
    report = world.run()
    reason = f"cannot write {sub}/o.0 as {OWNER}: Permission denied"
    assert report.held == {"7.0": reason, "7.1": reason.replace("o.0", "o.1")}
    assert list(elsewhere.iterdir()) == []


@needs_root
def test_missing_output_directory_is_made_as_the_user(world: World) -> None:
    data = json.loads((world.bundle / MANIFEST).read_text())
    for job in data["path_map"]["jobs"].values():
        job["out"] = str(world.iwd / "new" / "deeper" / f"o.{job['proc']}")
    (world.bundle / MANIFEST).write_text(json.dumps(data))
    world.run()
    for d in (world.iwd / "new", world.iwd / "new" / "deeper"):
        assert (d.stat().st_uid, d.stat().st_gid) == IDS
    assert (world.iwd / "new" / "deeper" / "o.0").stat().st_uid == IDS[0]


def test_root_owned_symlink_on_the_way_is_followed(world: World, tmp_path: Path) -> None:
    from lumberjack.ap import safe_write

    real = tmp_path / "real"
    real.mkdir()
    os.chmod(tmp_path, 0o755)
    (tmp_path / "alias").symlink_to(real)
    fd = safe_write.open_dir(str(tmp_path / "alias"))
    try:
        assert os.fstat(fd).st_ino == real.stat().st_ino
    finally:
        os.close(fd)


# --- the placed journal: a rerun after a crash places only what was not recorded -------


def _placed_log(world: World) -> Path:
    return world.work / "import-state" / output_writer.PLACED


def _placed_per_job(world: World) -> dict[str, int]:
    report = world.run(dry_run=True)
    counts: dict[str, int] = {}
    for p in report.placements:
        counts[p["job"]] = counts.get(p["job"], 0) + 1
    return counts


def test_a_rerun_places_nothing_again(world: World) -> None:
    per_job = _placed_per_job(world)
    first = world.run()
    assert first.files_placed == sum(per_job.values()) > 0
    assert _placed_log(world).read_text() == "7.0\n7.1\n"
    assert world.run().files_placed == 0
    assert _placed_log(world).read_text() == "7.0\n7.1\n"


def test_a_placed_line_a_crash_cut_short_is_placed_again(world: World) -> None:
    per_job = _placed_per_job(world)
    world.run()
    _placed_log(world).write_text("7.0\n7.")  # "7.1" torn: not a record of 7.1 nor of "7."
    assert output_writer.read_placed(_placed_log(world).parent) == {"7.0"}
    assert world.run().files_placed == per_job["7.1"]
    assert _placed_log(world).read_text() == "7.0\n7.1\n"


def test_an_import_begun_by_an_older_version_keeps_its_record(world: World) -> None:
    per_job = _placed_per_job(world)
    state = world.work / "import-state"
    state.mkdir()
    (state / output_writer.LEGACY_PLACED).write_text(json.dumps(["7.0"]))
    assert world.run().files_placed == per_job["7.1"]
    assert world.run().files_placed == 0


# --- unprivileged: the owner imports their own bundle, another user cannot ---------------


def _as_account(name: str, action) -> str:  # noqa: ANN001
    """`action()` in a forked child that has become `name` for good; what it reports
    ("ok" or the error's type and text)."""
    entry = pwd.getpwnam(name)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            action()
            answer = "ok"
        except BaseException as exc:  # reported to the parent, never raised here
            answer = f"{type(exc).__name__}: {exc}"
        os.write(write_end, answer.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as reader:
        answer = reader.read()
    os.waitpid(pid, 0)
    return answer


@needs_root
def test_an_unprivileged_owner_imports_and_another_user_cannot(world: World) -> None:
    world.save()
    for path in (world.bundle, *world.bundle.rglob("*")):
        os.lchown(path, *IDS)
    os.chown(world.work, *IDS)
    os.chmod(world.bundle, 0o700)

    def run() -> None:
        importer.run_import(None, world.bundle, world.returned, work_dir=world.work)

    other = "daemon"  # a second unprivileged account: nobody's bundle is not theirs
    assert _as_account(other, run).startswith("BadInput: ")
    assert not (world.iwd / "out.0").exists()
    assert _as_account(OWNER, run) == "ok"
    assert (world.iwd / "out.0").read_text() == "out 0\n"
    assert (world.iwd / "out.0").stat().st_uid == IDS[0]


@needs_root
def test_a_held_job_says_so_in_its_user_log_once(world: World) -> None:
    root_dir = world.tmp / "rootdir"  # root's, 0755: the owner may not write in it
    root_dir.mkdir()
    data = json.loads((world.bundle / MANIFEST).read_text())
    data["path_map"]["jobs"]["7.0"]["out"] = str(root_dir / "o.0")
    (world.bundle / MANIFEST).write_text(json.dumps(data))
    report = world.run()
    reason = f"cannot write {root_dir}/o.0 as {OWNER}: Permission denied"
    assert report.held == {"7.0": reason}
    log = (world.iwd / "job.log").read_bytes()
    start = event(0, "007.000", "Job submitted") + event(1, "007.000")
    assert log.startswith(start) and b"Job terminated" not in log
    # As HTCondor's shadow writes a failed output transfer: error, eviction, hold.
    when = rb"\(007\.000\.000\) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d "
    codes = b"\n\tCode 12 Subcode 13\n\\.\\.\\.\n"
    assert re.fullmatch(
        b"021 "
        + when
        + b"Error from starter on the site:\n\t"
        + re.escape(reason.encode())
        + codes
        + b"004 "
        + when
        + b"Job was evicted\\.\n\t\\(0\\) CPU times\n[^.]*\\.\\.\\.\n"
        + b"012 "
        + when
        + b"Job was held\\.\n\t"
        + re.escape(reason.encode())
        + codes,
        log[len(start) :],
    ), log
    assert list(root_dir.iterdir()) == []
    time.sleep(1.1)  # a rerun after a crash, later: the same returned queue, told once
    importer.run_import(None, world.bundle, world.returned, work_dir=world.work)
    assert (world.iwd / "job.log").read_bytes() == log


@needs_root
def test_an_output_remapped_into_a_missing_directory_lands_as_htcondor_puts_it(
    world: World,
) -> None:
    """HTCondor 25's shadow makes the missing directory of a remapped output (the
    conformance suite's reference pool shows it); a job held for an output that cannot
    be written has its completion taken back, as HTCondor counts none."""
    data = json.loads((world.bundle / MANIFEST).read_text())
    data["path_map"]["jobs"]["7.0"]["remaps"] = [["res.txt", "missing/res.txt"]]
    (world.bundle / MANIFEST).write_text(json.dumps(data))
    (world.job_dir(0) / "res.txt").write_text("result\n")
    world.queue["7.0"].set("NumJobCompletions", "1")
    report = world.run()
    assert report.held == {}
    assert (world.iwd / "missing" / "res.txt").read_text() == "result\n"
    world.save()
    _, merge, _ = importer.plan_import(world.bundle, world.returned)
    reason = f"cannot write {world.iwd}/missing/res.txt as {OWNER}: Permission denied"
    importer.hold(merge, "7.0", output_writer.CannotPlace(reason, 13))
    held = merge.ads["7.0"]
    assert (held.get("HoldReasonCode"), held.get("HoldReasonSubCode")) == ("12", "13")
    assert held.get("NumJobCompletions") == "0"


def test_a_queue_log_read_again_is_hashed_and_bounded_from_its_start() -> None:
    """A log the one pass leaves to the two passes is read twice: the sent log's digest
    and the returned log's byte bound count each byte once, not twice."""
    from lumberjack.core import jobqueuelog_onepass as onepass

    # Two spellings of one name: only the two passes settle which the ad keeps.
    data = b"101 1.0 Job Machine\n103 1.0 JobStatus 1\n103 1.0 jobstatus 2\n"
    hashing = import_queues._Hashing(io.BytesIO(data))
    ads, records = onepass.read_ads_counted(hashing, "q.log")
    assert records == 3 and ads["1.0"].get("JobStatus") == "2"
    assert hashing.digest.hexdigest() == hashlib.sha256(data).hexdigest()
    assert hashing.size == len(data)
    bounded = import_queues._BoundedReader(io.BytesIO(data), len(data))
    assert onepass.read_ads_counted(bounded, "q.log")[1] == 3


def test_a_job_left_at_the_site_over_a_cap_is_held_with_htcondors_code(world: World) -> None:
    # Fetch brought only its events (transfer.download's job_log): import holds it with
    # MaxTransferOutputSizeExceeded, writes the hold after its events, places nothing.
    (world.job_dir(0) / "_condor_stdout").unlink()
    why = "returns 9000 bytes, over the cap of 100 bytes per job (LUMBERJACK_RETURN_MAX_JOB_BYTES)"
    report = world.run(over_cap={"7.0": why}, site="testsite")
    reason = (f"Transfer output files failure from site testsite: the job {why}; its outputs "
              "were left there")  # fmt: skip
    assert report.held == {"7.0": reason} and report.completed == 0
    assert not (world.iwd / "out.0").exists()  # and the rest comes home:
    assert (world.iwd / "out.1").read_text() == "out 1\n" and "7.1" not in report.held
    log = (world.iwd / "job.log").read_bytes()
    assert b"Job terminated" not in log and event(1, "007.000") in log
    assert log.endswith(f"\t{reason}\n\tCode {returns.HOLD_OVER_CAP} Subcode 0\n...\n".encode())
    assert returns.HOLD_OVER_CAP == 33  # HTCondor's MaxTransferOutputSizeExceeded


def test_a_completed_job_held_at_import_counts_no_completion() -> None:
    # HTCondor counts no completion for a job whose output never arrived.
    from types import SimpleNamespace

    ad = jql.Ad("7.0", "Job", "Machine", {"JobStatus": "4", "NumJobCompletions": "1"})
    merge = SimpleNamespace(ads={"7.0": ad}, statuses={"7.0": importer.JobStatus.COMPLETED},
                            completed=1)  # fmt: skip
    exc = output_writer.CannotPlace("over the cap", 0, returns.HOLD_OVER_CAP)
    importer.hold(merge, "7.0", exc)  # type: ignore[arg-type]
    assert (ad.get("JobStatus"), ad.get("NumJobCompletions"), merge.completed) == ("5", "0", 0)
    assert (ad.get("HoldReasonCode"), ad.get("HoldReasonSubCode")) == ("33", "0")


def test_a_hold_at_import_is_one_bounded_string_literal_in_the_ad_and_the_log() -> None:
    # A reason may name what the site chose: one line, cut, a literal, the same text in
    # the job's HoldReason and in its user log's hold event.
    from types import SimpleNamespace

    ad = jql.Ad("7.0", "Job", "Machine", {"JobStatus": "2"})
    merge = SimpleNamespace(ads={"7.0": ad}, statuses={}, completed=0)
    said = 'cannot write /x/a") || true || ("\\\nb\x00\x1b[2J' + "r" * 5000
    importer.hold(merge, "7.0", output_writer.CannotPlace(said, 13))  # type: ignore[arg-type]
    text = ('cannot write /x/a") || true || ("\\ b??[2J' + "r" * 5000)[: result_attrs.TEXT]
    assert ad.get("HoldReason") == '"' + text.replace('"', '\\"') + '"'
    log = userlog.held_events(userlog.Events(), 7, 0, said, 12, 13, 0).decode()
    assert log.count(f"\t{text}\n") == 2  # the error (021) and the hold (012)
