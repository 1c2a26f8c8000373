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

import functools
import hashlib
import os
import posixpath
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lumberjack.ap import as_user, checkpoint_home, result_attrs, results, safe_write, userlog
from lumberjack.ap import bundle as bundle_mod
from lumberjack.ap.handover import QUEUE_LOG, handed_over
from lumberjack.ap.import_queues import read_returned_queue, read_sent_queue
from lumberjack.ap.job_paths import JobPaths
from lumberjack.ap.output_writer import (
    PLACED,
    CannotPlace,
    JobPlan,
    PlacedJournal,
    place_job,
    read_placed,
)
from lumberjack.ap.pathmap import PathMap
from lumberjack.ap.placement import check_safe_relative, plan_outputs
from lumberjack.ap.remote_layout import REMOTE_USERLOG_NAME
from lumberjack.ap.schedd import LocalSchedd, import_as_owner
from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw
from lumberjack.core.classad_text import site_string
from lumberjack.core.crashpoints import crash_point
from lumberjack.core.jobstatus import FINAL, JobStatus, status_of
from lumberjack.core.records import JsonRecord
from lumberjack.core.returns import HOLD_OVER_CAP, Limits, name_problem
from lumberjack.errors import BadInput
from lumberjack.host.identity import Owner, acting_as, owner_of


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
    # jobs held because an output could not be placed as the owner: the reason
    held: dict[str, str] = field(default_factory=dict)
    # jobs that come back held because the site held them
    held_at_site: list[str] = field(default_factory=list)
    # unfinished jobs whose site checkpoint is in the local spool: they resume from it
    resume_from_site: list[str] = field(default_factory=list)
    # unfinished jobs that start anew here, and why (checkpoint_home)
    start_anew: dict[str, str] = field(default_factory=dict)


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


def _by_number(ads: dict[str, jql.Ad]) -> dict[tuple[int, int], jql.Ad]:
    return {jql.key_numbers(k): ad for k, ad in ads.items()}


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
    site: str | None = None,
) -> QueueMerge:
    """The queue for the schedd: every sent ad as it left, each job plus its results
    (a job held at the ``site`` says so in its HoldReason).

    With ``consume`` the caller hands ``returned`` and ``sent`` over: they are emptied as
    the merge goes, so three whole queues are never in memory at once.
    """
    back = _by_number(returned)
    sent_nums = {jql.key_numbers(k) for k in sent}
    if consume:
        returned.clear()  # `back` holds the ads now
    wanted = set(jobs)
    merge = QueueMerge({})
    for key in list(sent):
        ad = sent.pop(key) if consume else sent[key]
        num = jql.key_numbers(key)
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
        new, changes = results.take_results(original_ad(ad, path_map.jobs[key]), ad, there, site)
        merge.ads[key] = new
        if changes:
            merge.site_changes[key] = changes.to_json()
        status = status_of(new.get("JobStatus"))
        merge.statuses[key] = status
        if status is JobStatus.COMPLETED:
            merge.completed += 1
        if status_of(there.get("JobStatus")) not in FINAL:
            merge.idle += 1
    # The site's schedd keeps a user record (0.N) for the site account: bookkeeping.
    merge.not_sent = [
        ad.key for num, ad in back.items()
        if num not in sent_nums and jql.key_kind(ad.key) != "user"
    ]  # fmt: skip
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
    owner: Owner | None = None,
    reader: Owner | None = None,
    site: str | None = None,
    removed_at_home: frozenset[str] = frozenset(),
    over_cap: Mapping[str, str] | None = None,
) -> tuple[bundle_mod.Manifest, QueueMerge, list[JobPlan]]:
    """Check everything that came back; raise BadInput before any change. The bundle is
    read as ``owner``, the returned spool as ``reader`` (None: as this process). The
    manifest given back (``read``'s too) has let go of its path map's JSON: the checked
    records replace it. ``removed_at_home``: jobs condor_rm removed at home, whose end
    event the local schedd writes (their site's terminated or aborted event is left out).
    ``over_cap``: the jobs fetch left at the site over a cap (job -> why), held here with
    their events only."""
    limits = limits or Limits.from_env(BadInput)
    # Parsing, merging and planning build a few objects per attribute and free none until
    # the end, none in a cycle: the cyclic collector would walk them all, again and again.
    with jql.no_gc():
        manifest, path_map, merge, returned_at = _merged(
            bundle_dir, spool, manifest_sha256, read, owner, reader, site
        )
        with acting_as(reader):
            plans = _plan_jobs(
                spool, manifest, path_map, merge, limits, returned_at, removed_at_home
            )
    _hold_over_cap(plans, over_cap or {}, site)
    return manifest, merge, plans


def _merged(
    bundle_dir: Path,
    spool: Path,
    manifest_sha256: str | None,
    read: bundle_mod.ReadManifest | None,
    owner: Owner | None,
    reader: Owner | None,
    site: str | None,
) -> tuple[bundle_mod.Manifest, PathMap, QueueMerge, float]:
    """plan_import's checked manifest and path map, the merge, and when the returned
    queue was written."""
    with acting_as(owner):
        manifest = load_checked_manifest(bundle_dir, manifest_sha256, read)
        path_map = PathMap.from_json(manifest.path_map)
        # From here on the checked records answer for the path map: its JSON (a quarter
        # of import's memory at 100,000 jobs) goes before the two queues are read.
        manifest.path_map = {}
        sent, size = read_sent_queue(bundle_dir, manifest, path_map)
    if sent is None:
        raise BadInput(
            f"{bundle_dir}: no intact copy of the queue as it left (native/job_queue.log); "
            "cannot tell the site's results from its changes"
        )
    sent_bytes, sent_records = size or _log_size(sent)
    with acting_as(reader):
        returned = read_returned_queue(spool / QUEUE_LOG, sent_bytes, sent_records)
        returned_at = os.stat(spool / QUEUE_LOG).st_mtime
    merge = merge_queue(returned, sent, path_map, list(manifest.jobs), consume=True, site=site)
    return manifest, path_map, merge, returned_at


def _plan_jobs(
    spool: Path,
    manifest: bundle_mod.Manifest,
    path_map: PathMap,
    merge: QueueMerge,
    limits: Limits,
    returned_at: float,
    removed_at_home: frozenset[str] = frozenset(),
) -> list[JobPlan]:
    """Each merged job's returned files checked and its outputs planned."""
    plans = []
    total = 0
    spool_prefix = path_map.remote_spool + "/"  # normalised, never "/" (norm_spool)
    for job_id in manifest.jobs:
        if job_id not in merge.statuses:
            continue
        paths = path_map.jobs[job_id]
        remote_iwd = paths.remote_iwd  # the spool's own layout in a checked path map
        if remote_iwd.startswith(spool_prefix):
            relative = remote_iwd[len(spool_prefix) :]
        else:
            relative = posixpath.relpath(remote_iwd, path_map.remote_spool)
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
        plan.returned_at = returned_at
        plan.checkpoint = checkpoint_home.plan(paths, plan.status, present, merge.ads)
        if any(p.kind == "userlog" for p in placements):
            data = _read_returned(job_dir / REMOTE_USERLOG_NAME)
            # A job removed at home ends there: no end event of the site's (None).
            status = None if job_id in removed_at_home else plan.status
            plan.events = userlog.filter_events(data, paths.cluster, paths.proc, status)
        plans.append(plan)
    return plans


def _read_returned(path: Path) -> bytes:
    fd, _ = safe_write.open_returned(str(path))
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def _log_size(ads: dict[str, jql.Ad]) -> tuple[int, int]:
    """(bytes, records) of the log write_log() writes for ``ads``: it bounds the
    returned queue's."""
    text = jqlw.log_text(ads)
    return len(text.encode("utf-8", "surrogateescape")), text.count("\n")


def check_returned_name(name: str, job_id: str) -> None:
    """Refuse a name no job should write, by the rule fetch applies (core.returns)."""
    problem = name_problem(name)
    if problem is not None:
        raise BadInput(f"job {job_id}: returned file name {name[:60]!r}: {problem}")


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


def _without_gc(func: Callable[..., ImportReport]) -> Callable[..., ImportReport]:
    """``func`` with the cyclic collector paused (see plan_import) until the schedd has
    merged the plan: resumed before, it would walk all of the plan once more."""

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> ImportReport:
        with jql.no_gc():
            return func(*args, **kwargs)

    return run


@_without_gc
def run_import(
    schedd: LocalSchedd | None,
    bundle_dir: Path,
    spool: Path,
    *,
    work_dir: Path,
    owner: str | None = None,
    bundle_reader: Owner | None = None,
    spool_reader: Owner | None = None,
    dry_run: bool = False,
    manifest_sha256: str | None = None,
    limits: Limits | None = None,
    after_append: Callable[[], None] | None = None,
    read: bundle_mod.ReadManifest | None = None,
    site: str | None = None,
    local_spool: str | None = None,
    removed_at_home: frozenset[str] = frozenset(),  # see plan_import
    over_cap: Mapping[str, str] | None = None,  # see plan_import
) -> ImportReport:
    """Import a returned spool (from ``site``: named in the HoldReason of jobs held there).

    Everything on the user's side (outputs, user logs, the schedd's merge) is done as
    the jobs' owner, the manifest's, which must be ``owner`` when given (the ledger's).
    The bundle is read as ``bundle_reader``, the returned spool as ``spool_reader`` (None:
    as this process; an owner's bundle or handed-in spool as that user). ``work_dir``:
    this account's private import state (journals, the schedd's copy of the queue).
    ``read``: the manifest as the caller read it, checked against ``manifest_sha256``.
    ``local_spool``: where unfinished jobs' checkpoints go (None: the schedd's SPOOL);
    ``removed_at_home``, ``over_cap``: as plan_import's.
    """
    manifest, merge, plans = plan_import(
        bundle_dir, spool, manifest_sha256=manifest_sha256, limits=limits, read=read,
        owner=bundle_reader, reader=spool_reader, site=site, removed_at_home=removed_at_home,
        over_cap=over_cap,
    )  # fmt: skip
    if owner and manifest.owner != owner:
        raise BadInput(
            f"{bundle_dir}: the bundle names owner {manifest.owner!r}, but the export is "
            f"{owner!r}'s; refusing to import"
        )
    acting = owner_of(manifest.owner)
    report = _planned_report(manifest, merge, plans)
    if dry_run:
        return report

    state_dir = private_dir(work_dir / "import-state")
    placed = read_placed(state_dir)
    homecoming = checkpoint_home.Homecoming(schedd, local_spool, report)
    with PlacedJournal(state_dir / PLACED) as journal:
        for plan in plans:
            if plan.paths.job_id in placed:
                continue
            homecoming.bring(plan, acting, spool_reader)  # before the job is recorded placed
            try:
                done = place_job(
                    plan, state_dir, acting, manifest.owner, spool_reader, after_append
                )
            except CannotPlace as exc:
                hold(merge, plan.paths.job_id, exc)
                report.held[plan.paths.job_id] = exc.reason
                continue
            report.files_placed += done.files
            report.bytes_placed += done.bytes
            report.events_appended += done.events
            journal.add(plan.paths.job_id)
            crash_point("import.mid-placement")
    report.completed = merge.completed

    crash_point("import.before-merge")
    if schedd is not None:
        wake = next((k for k, s in merge.statuses.items() if s is JobStatus.IDLE), None)
        with handed_over(work_dir, merge.ads, acting) as merge_dir:
            if acting is None:
                schedd.import_results(merge_dir, wake)
            else:  # the schedd opens the queue as whom it authenticates: the owner
                args = {"location": schedd.location, "import_dir": str(merge_dir), "wake": wake}
                as_user.call_as(manifest.owner, import_as_owner, args)
    return report


def _planned_report(
    manifest: bundle_mod.Manifest, merge: QueueMerge, plans: list[JobPlan]
) -> ImportReport:
    """What the import will do, before anything is done (all a dry run says)."""
    report = ImportReport(manifest.name, jobs=len(plans))
    report.completed, report.handed_back_idle = merge.completed, merge.idle
    report.site_changes = merge.site_changes
    report.not_sent, report.missing = merge.not_sent, merge.missing
    report.held_at_site = [k for k, s in merge.statuses.items() if s is JobStatus.HELD]
    _list_plans(report, plans)
    return report


def _hold_over_cap(plans: list[JobPlan], over_cap: Mapping[str, str], site: str | None) -> None:
    """The jobs fetch left at the site over a per-job cap are held, whatever their
    destinations (HTCondor's MaxTransferOutputSizeExceeded, subcode 0)."""
    for plan in plans:
        why = over_cap.get(plan.paths.job_id)
        if why is not None:
            text = (f"Transfer output files failure from site {site}: the job {why}; its "
                    "outputs were left there")  # fmt: skip
            plan.held = CannotPlace(text, 0, HOLD_OVER_CAP)


def _list_plans(report: ImportReport, plans: list[JobPlan]) -> None:
    """What import will do, in the report (a dry run's too)."""
    for plan in plans:
        for p in plan.placements:
            report.placements.append({"job": plan.paths.job_id, "kind": p.kind, "dest": p.dest})
        if plan.events is not None:
            report.events[plan.paths.job_id] = plan.events.to_json()
        checkpoint_home.tally(plan.paths.job_id, plan.checkpoint, report)


def hold(merge: QueueMerge, job_id: str, exc: CannotPlace) -> None:
    """The job comes home held, as HTCondor holds a job whose output it cannot write."""
    ad = merge.ads[job_id]
    ad.set("JobStatus", str(int(JobStatus.HELD)))
    # The reason may name a file the site chose: bounded, one line, a literal.
    ad.set("HoldReason", site_string(exc.reason, result_attrs.TEXT))
    ad.set("HoldReasonCode", str(exc.hold_code))
    ad.set("HoldReasonSubCode", str(exc.errno))
    ad.set("EnteredCurrentStatus", str(int(time.time())))
    if merge.statuses.get(job_id) is JobStatus.COMPLETED:
        merge.completed -= 1
        # HTCondor counts a completion only once the outputs are home: a failed output
        # transfer holds the job uncounted.
        count = ad.get("NumJobCompletions")
        if count is not None and count.strip().isdigit() and int(count) > 0:
            ad.set("NumJobCompletions", str(int(count) - 1))
    merge.statuses[job_id] = JobStatus.HELD


def private_dir(path: Path) -> Path:
    """`path` as a real directory of this account, 0700, made if missing."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise BadInput(f"{path} is not a directory of this account; remove it and try again")
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path
