"""Import: take a remote spool back, check it, put outputs in place, merge the job ads.

What comes back from a site is untrusted input. Everything is checked and planned first
(the log parses within bounds, every file name is safe and every file a plain file within
the size caps, every output lands inside the job's original directories); only then does
anything change. The queue handed to the schedd is the access point's own copy of each
job plus its results (results.py); ads the site added and attributes it changed are
reported, never merged. Outputs are placed (safe_write.py) and events appended
(userlog.py) before the schedd merges the ads, and each step is recorded, so a crash
anywhere is finished by running import again: no output missed, no event appended
twice, no job merged twice (the schedd only merges jobs still managed externally).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable

from lumberjack.ap import bundle as bundle_mod
from lumberjack.ap import results, safe_write, userlog
from lumberjack.ap.export import owner_ids, prepare_owned_dir
from lumberjack.ap.pathmap import REMOTE_USERLOG_NAME, JobPaths, PathMap, rewrite_job
from lumberjack.ap.placement import Placement, check_safe_relative, plan_outputs
from lumberjack.ap.schedd import LocalSchedd
from lumberjack.core import jobqueuelog as jql
from lumberjack.core.crashpoints import crash_point
from lumberjack.core.jobstatus import FINAL, JobStatus, status_of
from lumberjack.core.records import JsonRecord

# The caps live with fetch's (core.returns); their names stay importable from here.
from lumberjack.core.returns import (  # noqa: F401
    DEFAULT_MAX_JOB_BYTES,
    DEFAULT_MAX_JOB_FILES,
    DEFAULT_MAX_TOTAL_BYTES,
    MAX_JOB_BYTES_ENV,
    MAX_JOB_FILES_ENV,
    MAX_TOTAL_BYTES_ENV,
    NAME_MAX,
    PATH_MAX,
    Limits,
)
from lumberjack.errors import BadInput

PLACED = "placed.log"  # in BUNDLE/import-state: jobs whose outputs are in place, one a line
LEGACY_PLACED = "placed.json"  # the same as one JSON list (an import begun by an older version)
#: The placed journal is fsynced after this many jobs (and at the end).
PLACED_SYNC_EVERY = 1000
QUEUE_LOG = "job_queue.log"

#: A returned queue may grow this much over the one sent (status, results, history).
QUEUE_GROWTH = 16
QUEUE_SLACK_BYTES = 1 << 20


@dataclass
class ImportReport(JsonRecord):
    name: str
    jobs: int = 0
    completed: int = 0
    handed_back_idle: int = 0
    files_placed: int = 0
    bytes_placed: int = 0
    placements: list[dict[str, str]] = field(default_factory=list)
    # per ad key: attribute names the site changed outside the results (never merged)
    site_changes: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # ads in the returned queue this export never sent (ignored)
    not_sent: list[str] = field(default_factory=list)
    # jobs sent but absent from the returned queue (left as they are)
    missing: list[str] = field(default_factory=list)
    # per job: user-log events kept and dropped (by reason)
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    events_appended: int = 0


@dataclass
class JobPlan:
    paths: JobPaths
    placements: list[Placement]
    job_dir: Path
    status: JobStatus | None
    events: userlog.Events | None = None


def find_returned_spool(directory: Path) -> tuple[Path, Path]:
    """(bundle dir with manifest.json, returned spool with job_queue.log) for `import --in`."""
    for bundle_dir, spool in (
        (directory, directory / bundle_mod.SPOOL),
        (directory.parent, directory),
    ):
        if (bundle_dir / bundle_mod.MANIFEST).is_file() and (spool / QUEUE_LOG).is_file():
            return bundle_dir, spool
    raise BadInput(f"{directory}: expected a bundle with manifest.json and spool/job_queue.log")


def manifest_digest(bundle_dir: Path) -> str:
    """What the ledger keeps at export: a changed manifest or path map is refused."""
    return bundle_mod.sha256_file(bundle_dir / bundle_mod.MANIFEST)


def load_checked_manifest(
    bundle_dir: Path, expected_sha256: str | None, read: bundle_mod.ReadManifest | None = None
) -> bundle_mod.Manifest:
    """The manifest, refused when its sha256 is not the one the ledger recorded (checked
    before it is parsed); ``read``: the manifest as a caller already read and parsed it."""
    data = read.data if read is not None else bundle_mod.read_manifest_bytes(bundle_dir)
    if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256:
        raise BadInput(
            f"{bundle_dir / bundle_mod.MANIFEST} changed after export "
            "(its sha256 is not the one the ledger recorded); refusing to import"
        )
    return read.manifest if read is not None else bundle_mod.parse_manifest_bytes(bundle_dir, data)


def read_returned_queue(path: Path, sent_bytes: int, sent_records: int) -> dict[str, jql.Ad]:
    """The returned queue, refused when far larger than the one sent."""
    max_bytes = QUEUE_GROWTH * sent_bytes + QUEUE_SLACK_BYTES
    max_records = QUEUE_GROWTH * sent_records + 10_000
    try:
        st = os.stat(path, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"returned queue {path} is not a regular file")
        if st.st_size > max_bytes:
            raise BadInput(
                f"returned queue is {st.st_size} bytes, more than {max_bytes} for a queue "
                f"of {sent_bytes} bytes sent; refusing to read it"
            )
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            records = jql.parse_file(
                _BoundedReader(handle, max_bytes), str(path), max_records=max_records
            )
    except OSError as exc:
        raise BadInput(f"returned queue unreadable: {exc.strerror or exc}") from exc
    except jql.TooManyRecords:
        raise BadInput(
            f"returned queue has more than {max_records} records for {sent_records} sent; "
            "refusing to read it"
        ) from None
    except jql.JobQueueLogError as exc:
        raise BadInput(f"returned queue is corrupt: {exc}") from exc
    try:
        return jql.replay(records, str(path))
    except jql.JobQueueLogError as exc:
        raise BadInput(f"returned queue is corrupt: {exc}") from exc


class _BoundedReader:
    """A file read a piece at a time (the queue's text never exists whole) that refuses
    to give more than `limit` bytes: a file growing while it is read is refused too."""

    def __init__(self, handle: BinaryIO, limit: int) -> None:
        self.handle, self.limit, self.total = handle, limit, 0

    def read(self, size: int, /) -> bytes:
        data = self.handle.read(size)
        self.total += len(data)
        if self.total > self.limit:
            raise BadInput(f"returned queue grew past {self.limit} bytes while read; refusing it")
        return data


def sent_queue(
    bundle_dir: Path, manifest: bundle_mod.Manifest, path_map: PathMap | None = None
) -> dict[str, jql.Ad] | None:
    """The queue as it left the access point, paths rewritten for the site.

    From the bundle's spool/job_queue.log while it is the file the manifest vouches for;
    else rebuilt from native/job_queue.log (what the schedd exported) by the same rewrite
    export did (with `import --in` the spool holds the other schedd's queue).
    """
    spool_log = bundle_dir / bundle_mod.SPOOL / QUEUE_LOG
    entry = next((f for f in manifest.files if f.path == QUEUE_LOG), None)
    try:
        if entry is not None and bundle_mod.sha256_file(spool_log) == entry.sha256:
            return jql.read_log(spool_log)
    except (OSError, jql.JobQueueLogError):
        pass
    try:
        ads = jql.read_log(bundle_dir / bundle_mod.NATIVE / QUEUE_LOG)
    except (OSError, jql.JobQueueLogError):
        return None
    path_map = path_map or PathMap.from_json(manifest.path_map)
    clusters = {
        jql.parse_key(k).cluster: ad for k, ad in ads.items() if jql.key_kind(k) == "cluster"
    }
    for key, ad in ads.items():
        if jql.key_kind(key) != "proc" or key not in path_map.jobs:
            continue
        job = jql.parse_key(key)
        cluster_ad = clusters.get(job.cluster)
        rewrite = rewrite_job(
            job.cluster,
            job.proc,
            cluster_ad.attrs if cluster_ad else {},
            ad.attrs,
            path_map.remote_spool,
            local_iwd=path_map.jobs[key].local_iwd,
        )
        for attr, value in rewrite.proc_overrides.items():
            ad.set(attr, value)
    return ads


def _sent_queue(bundle_dir: Path) -> dict[str, jql.Ad] | None:
    """sent_queue() for a bundle whose manifest is read here (tests, older callers)."""
    try:
        return sent_queue(bundle_dir, bundle_mod.load_manifest(bundle_dir))
    except BadInput:
        return None


def _by_number(ads: dict[str, jql.Ad]) -> dict[jql.JobKey, jql.Ad]:
    return {jql.parse_key(k): ad for k, ad in ads.items()}


def original_ad(sent: jql.Ad, paths: JobPaths) -> jql.Ad:
    """A sent proc ad as it was on the access point: the path map reversed."""
    ad = jql.Ad(sent.key, sent.my_type, sent.target_type, dict(sent.attrs))
    restore, delete = paths.reverse_overrides()
    for name in delete:
        ad.delete(name)
    for name, value in restore.items():
        ad.set(name, value)
    return ad


@dataclass
class QueueMerge:
    ads: dict[str, jql.Ad]
    completed: int = 0
    idle: int = 0
    statuses: dict[str, JobStatus | None] = field(default_factory=dict)
    site_changes: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    not_sent: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def merge_queue(
    returned: dict[str, jql.Ad],
    sent: dict[str, jql.Ad],
    path_map: PathMap,
    jobs: list[str],
    *,
    consume: bool = False,
) -> QueueMerge:
    """The queue for the schedd: every sent ad as it left, each job plus its results.

    With ``consume`` the caller hands ``returned`` and ``sent`` over: they are emptied as
    the merge goes, so three whole queues are never in memory at once.
    """
    back = _by_number(returned)
    sent_nums = {jql.parse_key(k) for k in sent}
    if consume:
        returned.clear()  # `back` holds the ads now
    wanted = set(jobs)
    merge = QueueMerge({})
    for key in list(sent):
        ad = sent.pop(key) if consume else sent[key]
        num = jql.parse_key(key)
        kind = jql.key_kind(key)
        there = back.pop(num, None) if consume else back.get(num)
        if kind != "proc":
            merge.ads[key] = jql.Ad(key, ad.my_type, ad.target_type, dict(ad.attrs))
            if there is not None and kind != "header":
                changes = results.diff_names(ad, there, results.EXPECTED_AT_SITE)
                if changes:
                    merge.site_changes[key] = changes.to_json()
            continue
        if key not in wanted:
            continue
        if there is None:
            merge.missing.append(key)
            continue
        new, changes = results.take_results(original_ad(ad, path_map.jobs[key]), ad, there)
        merge.ads[key] = new
        if changes:
            merge.site_changes[key] = changes.to_json()
        status = status_of(new.get("JobStatus"))
        merge.statuses[key] = status
        if status is JobStatus.COMPLETED:
            merge.completed += 1
        if status_of(there.get("JobStatus")) not in FINAL:
            merge.idle += 1
    merge.not_sent = [ad.key for num, ad in back.items() if num not in sent_nums]
    return merge


#: Who a job belongs to: a site runs the jobs as its own account (see agent.py).
IDENTITY_ATTRS = ("Owner", "User")


def import_ads(
    ads: dict[str, jql.Ad], path_map: PathMap, original: dict[str, jql.Ad] | None = None
) -> tuple[dict[str, jql.Ad], int, int]:
    """The queue to hand to the schedd and (completed, handed back idle) counts.

    ``original`` is the queue as sent (sent_queue); with it, each job is the access
    point's own ad plus its results (merge_queue). Without it only paths and status are
    put back on the returned ads, which run_import never does: it refuses a bundle
    without its sent queue.
    """
    if original is not None:
        merge = merge_queue(ads, original, path_map, list(path_map.jobs))
        return merge.ads, merge.completed, merge.idle
    completed = idle = 0
    for key, ad in ads.items():
        if jql.key_kind(key) != "proc":
            continue
        restore, delete = path_map.jobs[key].reverse_overrides()
        for name in delete:
            ad.delete(name)
        for name, value in restore.items():
            ad.set(name, value)
        status = status_of(ad.get("JobStatus"))
        if status is JobStatus.COMPLETED:
            completed += 1
        if status not in FINAL:
            ad.set("JobStatus", str(int(JobStatus.IDLE)))
            idle += 1
    return ads, completed, idle


def plan_import(
    bundle_dir: Path,
    spool: Path,
    *,
    manifest_sha256: str | None = None,
    limits: Limits | None = None,
    read: bundle_mod.ReadManifest | None = None,
) -> tuple[bundle_mod.Manifest, QueueMerge, list[JobPlan]]:
    """Check everything that came back; raise BadInput before any change."""
    limits = limits or Limits.from_env(BadInput)
    manifest = load_checked_manifest(bundle_dir, manifest_sha256, read)
    path_map = PathMap.from_json(manifest.path_map)
    sent = sent_queue(bundle_dir, manifest, path_map)
    if sent is None:
        raise BadInput(
            f"{bundle_dir}: no intact copy of the queue as it left (native/job_queue.log); "
            "cannot tell the site's results from its changes"
        )
    sent_bytes, sent_records = _log_size(sent)
    returned = read_returned_queue(spool / QUEUE_LOG, sent_bytes, sent_records)
    merge = merge_queue(returned, sent, path_map, list(manifest.jobs), consume=True)
    del returned, sent

    plans = []
    total = 0
    for job_id in manifest.jobs:
        if job_id not in merge.statuses:
            continue
        paths = path_map.jobs[job_id]
        relative = posixpath.relpath(paths.remote_iwd, path_map.remote_spool)
        job_dir = spool / check_safe_relative(relative, f"job {job_id}")
        present, size = list_returned_files(job_dir, job_id, limits)
        total += size
        if total > limits.total_bytes:
            raise BadInput(
                f"the returned files exceed {limits.total_bytes} bytes in total "
                f"(set {limits.total_bytes_var} to allow more); nothing imported"
            )
        placements = plan_outputs(paths, present, paths.transfer_output)
        plan = JobPlan(paths, placements, job_dir, merge.statuses[job_id])
        if any(p.kind == "userlog" for p in placements):
            data = (job_dir / REMOTE_USERLOG_NAME).read_bytes()
            plan.events = userlog.filter_events(data, paths.cluster, paths.proc, plan.status)
        plans.append(plan)
    return manifest, merge, plans


def _log_size(ads: dict[str, jql.Ad]) -> tuple[int, int]:
    """(bytes, records) of the log write_log() writes for ``ads``: it bounds the
    returned queue's."""
    text = jql.log_text(ads)
    return len(text.encode("utf-8", "surrogateescape")), text.count("\n")


def check_returned_name(name: str, job_id: str) -> None:
    """Refuse names no job should write: control characters, too long for this system."""
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise BadInput(f"job {job_id}: returned file name {name!r} contains control characters")
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) > PATH_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise BadInput(f"job {job_id}: returned file name {name[:60]!r}... is too long")


def list_returned_files(
    job_dir: Path, job_id: str, limits: Limits | None = None
) -> tuple[list[str], int]:
    """Regular files under a job's returned directory and their total size; links,
    devices, FIFOs, sockets, hard links, odd names and files over the caps are refused."""
    limits = limits or Limits()
    if not job_dir.exists():
        return [], 0
    found = []
    size = 0
    # fwalk works through directory descriptors: no link is followed, no path too long.
    try:
        for root, dirs, files, root_fd in os.fwalk(job_dir):
            rel_root = os.path.relpath(root, job_dir)
            for name in dirs + files:
                rel = name if rel_root == "." else f"{rel_root}/{name}"
                check_returned_name(rel, job_id)
                st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    continue
                problem = safe_write.returned_file_problem(st)
                if problem:
                    raise BadInput(f"job {job_id}: returned {rel} {problem}")
                found.append(rel)
                size += st.st_size
                if len(found) > limits.job_files:
                    raise BadInput(
                        f"job {job_id}: more than {limits.job_files} returned files "
                        f"(set {limits.job_files_var} to allow more); nothing imported"
                    )
                if size > limits.job_bytes:
                    raise BadInput(
                        f"job {job_id}: returned files exceed {limits.job_bytes} bytes "
                        f"(set {limits.job_bytes_var} to allow more); nothing imported"
                    )
    except OSError as exc:
        raise BadInput(f"job {job_id}: cannot read the returned files: {exc.strerror}") from exc
    return sorted(found), size


def run_import(
    schedd: LocalSchedd | None,
    bundle_dir: Path,
    spool: Path,
    *,
    dry_run: bool = False,
    manifest_sha256: str | None = None,
    limits: Limits | None = None,
    after_append: Callable[[], None] | None = None,
    read: bundle_mod.ReadManifest | None = None,
) -> ImportReport:
    """Import a returned spool; ``read``: the bundle's manifest as the caller read it
    (bundle.read_manifest_once), checked against ``manifest_sha256`` and used as is."""
    manifest, merge, plans = plan_import(
        bundle_dir,
        spool,
        manifest_sha256=manifest_sha256,
        limits=limits,
        read=read,
    )
    report = ImportReport(manifest.name, jobs=len(plans))
    report.completed, report.handed_back_idle = merge.completed, merge.idle
    report.site_changes = merge.site_changes
    report.not_sent, report.missing = merge.not_sent, merge.missing
    for plan in plans:
        for p in plan.placements:
            report.placements.append({"job": plan.paths.job_id, "kind": p.kind, "dest": p.dest})
        if plan.events is not None:
            report.events[plan.paths.job_id] = plan.events.to_json()
    if dry_run:
        return report

    state_dir = bundle_dir / "import-state"
    state_dir.mkdir(exist_ok=True)  # the schedd, as the owner, reads merge/ inside it
    placed = read_placed(state_dir)
    ids = owner_ids(manifest.owner)
    with PlacedJournal(state_dir / PLACED) as journal:
        for plan in plans:
            if plan.paths.job_id in placed:
                continue
            place_job(plan, state_dir, ids, report, after_append)
            journal.add(plan.paths.job_id)
            crash_point("import.mid-placement")

    crash_point("import.before-merge")
    if schedd is not None:
        # The schedd opens the log read-write as the owner: a fresh owner-owned copy.
        merge_dir = state_dir / "merge"
        shutil.rmtree(merge_dir, ignore_errors=True)
        prepare_owned_dir(merge_dir, manifest.owner)
        jql.write_log(merge_dir / QUEUE_LOG, merge.ads)
        if os.geteuid() == 0 and ids is not None:
            os.chown(merge_dir / QUEUE_LOG, *ids)
        schedd.import_results(merge_dir)
    return report


def place_job(
    plan: JobPlan,
    state_dir: Path,
    ids: tuple[int, int] | None,
    report: ImportReport,
    after_append: Callable[[], None] | None = None,
) -> None:
    """Put one job's outputs in place and append its user-log events (once)."""
    for placement in plan.placements:
        dest = Path(placement.dest)
        if placement.kind == "userlog":
            assert plan.events is not None
            journal = userlog.journal_path(state_dir, plan.paths.job_id, placement.dest)
            written = append_events(dest, plan.events.data, journal, ids, after_append)
            report.events_appended += plan.events.kept if written else 0
            size = written
        else:
            size = place(plan.job_dir / placement.source, dest, placement.kind, ids)
        report.files_placed += 1
        report.bytes_placed += size


def read_placed(state_dir: Path) -> set[str]:
    """Jobs an earlier run of this import put in place (so they are not placed again).

    A last line without its newline is a write a crash cut short: that job is placed
    again, which is harmless (see PlacedJournal).
    """
    placed: set[str] = set()
    legacy = state_dir / LEGACY_PLACED
    if legacy.exists():
        placed.update(json.loads(legacy.read_text()))
    try:
        text = (state_dir / PLACED).read_text()
    except FileNotFoundError:
        return placed
    lines = text.split("\n")
    placed.update(line for line in lines[:-1] if line)  # lines[-1]: "" or a cut-short line
    return placed


class PlacedJournal:
    """Append-only record of the jobs whose outputs are in place: one job id a line.

    One write per job, fsynced every PLACED_SYNC_EVERY jobs and at the end; rewriting a
    whole list per job was quadratic. A process crash loses nothing written (the kernel
    holds it). A power cut may lose the lines since the last fsync; those jobs are then
    placed again on the next run, which is harmless: a regular output is the same returned
    file renamed into place again (atomic, same content), and user-log events have their
    own journal (userlog.append_once) that keeps them from being appended twice.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = -1
        self.unsynced = 0

    def __enter__(self) -> PlacedJournal:
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        self.fd = os.open(self.path, flags, 0o600)
        size = os.fstat(self.fd).st_size
        if size and os.pread(self.fd, 1, size - 1) != b"\n":
            # A line a crash cut short (read_placed skipped it): drop it, so that ending
            # it with the next line cannot turn "7.1" of "7.12" into a job id.
            whole = os.pread(self.fd, size, 0)
            os.ftruncate(self.fd, whole.rfind(b"\n") + 1)
        return self

    def add(self, job_id: str) -> None:
        line = f"{job_id}\n".encode()
        if os.write(self.fd, line) != len(line):
            raise OSError(f"{self.path}: short write")
        self.unsynced += 1
        if self.unsynced >= PLACED_SYNC_EVERY:
            self.sync()

    def sync(self) -> None:
        if self.unsynced:
            os.fsync(self.fd)
            self.unsynced = 0

    def __exit__(self, *exc: object) -> None:
        try:
            self.sync()
        finally:
            os.close(self.fd)


def append_events(
    dest: Path,
    data: bytes,
    journal: Path,
    ids: tuple[int, int] | None,
    after_append: Callable[[], None] | None = None,
) -> int:
    """Append a job's kept events to one user log, once (userlog.append_once)."""
    if not data:
        return 0
    dir_fd = safe_write.open_dir(str(dest.parent), ids, create=True)
    try:
        fd = safe_write.open_log(dir_fd, dest.name, ids)
    finally:
        os.close(dir_fd)
    try:
        userlog.check_log_file(fd, str(dest), ids[0] if os.geteuid() == 0 and ids else None)
        return userlog.append_once(fd, data, journal, after_append=after_append)
    finally:
        os.close(fd)


def place(source: Path, dest: Path, kind: str, ids: tuple[int, int] | None) -> int:
    """Copy one output into place atomically, never through a link (safe_write)."""
    if kind == "userlog":
        raise ValueError("user logs are appended with append_events")
    src_fd, st = safe_write.open_returned(str(source))
    try:
        dir_fd = safe_write.open_dir(str(dest.parent), ids, create=True)
        try:
            executable = bool(st.st_mode & 0o111)
            safe_write.write_file(dir_fd, dest.name, src_fd, st.st_size, executable, ids)
        finally:
            os.close(dir_fd)
    finally:
        os.close(src_fd)
    return st.st_size
