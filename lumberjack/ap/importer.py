"""Import: take a remote spool back, check it, put outputs in place, merge the job ads.

What comes back from a site is untrusted input. Everything is checked and planned first
(the log parses, names only jobs this export sent, every file name is safe, every output
lands inside the job's original directories); only then does anything change. Outputs
are placed before the schedd merges the ads, and each job's placement is recorded, so a
crash anywhere is finished by running import again: no output missed, no event appended
twice, no job merged twice (the schedd only merges jobs still managed externally).
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from lumberjack.ap import bundle as bundle_mod
from lumberjack.ap.export import owner_ids, prepare_owned_dir
from lumberjack.ap.pathmap import JobPaths, PathMap
from lumberjack.ap.placement import Placement, check_safe_relative, plan_outputs
from lumberjack.ap.schedd import LocalSchedd
from lumberjack.core import jobqueuelog as jql
from lumberjack.core.crashpoints import crash_point
from lumberjack.core.jobstatus import FINAL, JobStatus, status_of
from lumberjack.core.records import JsonRecord
from lumberjack.errors import BadInput

PLACED = "placed.json"  # in BUNDLE/import-state: jobs whose outputs are in place


@dataclass
class ImportReport(JsonRecord):
    name: str
    jobs: int = 0
    completed: int = 0
    handed_back_idle: int = 0
    files_placed: int = 0
    bytes_placed: int = 0
    placements: list[dict[str, str]] = field(default_factory=list)


def find_returned_spool(directory: Path) -> tuple[Path, Path]:
    """(bundle dir with manifest.json, returned spool with job_queue.log) for `import --in`."""
    for bundle_dir, spool in (
        (directory, directory / bundle_mod.SPOOL),
        (directory.parent, directory),
    ):
        if (bundle_dir / bundle_mod.MANIFEST).is_file() and (spool / "job_queue.log").is_file():
            return bundle_dir, spool
    raise BadInput(f"{directory}: expected a bundle with manifest.json and spool/job_queue.log")


def plan_import(
    bundle_dir: Path, spool: Path
) -> tuple[bundle_mod.Manifest, dict[str, jql.Ad], list[tuple[JobPaths, list[Placement], Path]]]:
    """Check everything that came back; raise BadInput before any change."""
    manifest = bundle_mod.load_manifest(bundle_dir)
    path_map = PathMap.from_json(manifest.path_map)
    try:
        ads = jql.read_log(spool / "job_queue.log")
    except jql.JobQueueLogError as exc:
        raise BadInput(f"returned queue is corrupt: {exc}") from exc
    except OSError as exc:
        raise BadInput(f"returned queue unreadable: {exc}") from exc
    sent = set(manifest.jobs)
    for key in ads:
        kind = jql.key_kind(key)
        job = jql.parse_key(key)
        if kind == "proc" and key not in sent:
            raise BadInput(f"returned queue names job {key}, which this export never sent")
        if (
            kind in ("cluster", "cluster_private", "jobset")
            and job.cluster not in manifest.clusters
        ):
            raise BadInput(
                f"returned queue names cluster {job.cluster}, which this export never sent"
            )

    plans = []
    for job_id in manifest.jobs:
        if job_id not in ads:
            continue
        paths = path_map.jobs[job_id]
        relative = posixpath.relpath(paths.remote_iwd, path_map.remote_spool)
        job_dir = spool / check_safe_relative(relative, f"job {job_id}")
        present = list_returned_files(job_dir, job_id)
        placements = plan_outputs(paths, present, paths.transfer_output)
        plans.append((paths, placements, job_dir))
    return manifest, ads, plans


def list_returned_files(job_dir: Path, job_id: str) -> list[str]:
    """Regular files under a job's returned directory; anything else is refused."""
    if not job_dir.exists():
        return []
    found = []
    for root, dirs, files in os.walk(job_dir):
        for name in dirs + files:
            path = Path(root) / name
            if path.is_symlink():
                raise BadInput(
                    f"job {job_id}: returned {path.relative_to(job_dir)} is a symbolic link"
                )
        for name in files:
            path = Path(root) / name
            if not path.is_file():
                raise BadInput(
                    f"job {job_id}: returned {path.relative_to(job_dir)} is not a regular file"
                )
            found.append(path.relative_to(job_dir).as_posix())
    return sorted(found)


#: Who a job belongs to: a site runs the jobs as its own account (see agent.py).
IDENTITY_ATTRS = ("Owner", "User")


def import_ads(
    ads: dict[str, jql.Ad], path_map: PathMap, original: dict[str, jql.Ad] | None = None
) -> tuple[dict[str, jql.Ad], int, int]:
    """The queue to hand to the schedd: original paths and owners back; unfinished jobs
    back to idle."""
    completed = idle = 0
    for key, ad in ads.items():
        if original is not None and key in original:
            for name in IDENTITY_ATTRS:
                value = original[key].get(name)
                if value is not None:
                    ad.set(name, value)
                else:  # inherited from the cluster ad: the site may not add its own
                    ad.delete(name)
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
            # Stopped at the site before it finished: it runs again, here or elsewhere.
            ad.set("JobStatus", str(int(JobStatus.IDLE)))
            idle += 1
    return ads, completed, idle


def run_import(
    schedd: LocalSchedd | None,
    bundle_dir: Path,
    spool: Path,
    *,
    dry_run: bool = False,
) -> ImportReport:
    manifest, ads, plans = plan_import(bundle_dir, spool)
    path_map = PathMap.from_json(manifest.path_map)
    report = ImportReport(manifest.name, jobs=len(plans))
    for paths, placements, _job_dir in plans:
        for p in placements:
            report.placements.append({"job": paths.job_id, "kind": p.kind, "dest": p.dest})
    ads, report.completed, report.handed_back_idle = import_ads(
        ads, path_map, _sent_queue(bundle_dir)
    )
    if dry_run:
        return report

    state_dir = bundle_dir / "import-state"
    state_dir.mkdir(exist_ok=True)
    placed_file = state_dir / PLACED
    placed = set(json.loads(placed_file.read_text())) if placed_file.exists() else set()
    ids = owner_ids(manifest.owner)
    for paths, placements, job_dir in plans:
        if paths.job_id in placed:
            continue
        for placement in placements:
            report.files_placed += 1
            report.bytes_placed += place(
                job_dir / placement.source, Path(placement.dest), placement.kind, ids
            )
        placed.add(paths.job_id)
        bundle_mod.write_atomic(placed_file, json.dumps(sorted(placed)).encode())
        crash_point("import.mid-placement")

    crash_point("import.before-merge")
    if schedd is not None:
        # The schedd opens the log read-write as the owner: a fresh owner-owned copy.
        merge_dir = state_dir / "merge"
        shutil.rmtree(merge_dir, ignore_errors=True)
        prepare_owned_dir(merge_dir, manifest.owner)
        jql.write_log(merge_dir / "job_queue.log", ads)
        if os.geteuid() == 0 and ids is not None:
            os.chown(merge_dir / "job_queue.log", *ids)
        schedd.import_results(merge_dir)
    return report


def _sent_queue(bundle_dir: Path) -> dict[str, jql.Ad] | None:
    """The queue as it left the access point (the bundle's spool), for its owners."""
    try:
        return jql.read_log(bundle_dir / "spool" / "job_queue.log")
    except (OSError, jql.JobQueueLogError):
        return None


def place(source: Path, dest: Path, kind: str, ids: tuple[int, int] | None) -> int:
    """Copy one output into place atomically (user logs: append the site's events)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if kind == "userlog":
        data = source.read_bytes()
        with open(dest, "ab") as out:
            out.write(data)
        size = len(data)
    else:
        tmp = dest.with_name(f".{dest.name}.lumberjack-part")
        shutil.copyfile(source, tmp)
        shutil.copymode(source, tmp)
        size = tmp.stat().st_size
        if os.geteuid() == 0 and ids is not None:
            os.chown(tmp, *ids)
        os.replace(tmp, dest)
    if os.geteuid() == 0 and ids is not None:
        os.chown(dest, *ids)
    return size
