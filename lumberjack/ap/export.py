"""Export: select jobs, check them, hand them to the schedd's export API, write the bundle.

Order matters for the invariant "a job is under exactly one schedd's control":
everything that can refuse (selection, preflight, the path map on the jobs' current ads)
runs BEFORE `export_jobs`, which is the moment the local schedd lets go. If anything
fails after it, the clusters are unexported again and the export is marked failed.
A crash between the two is found by `sync` (phase "exporting") and rolled back the same way.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import shutil
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lumberjack import __version__
from lumberjack.ap import as_user, bundle_home
from lumberjack.ap import bundle as bundle_mod
from lumberjack.ap.job_attrs import (
    CONTAINER_IMAGE,
    CONTAINER_IMAGE_FULL_PATH,
    CONTROL_ATTRS,
    DAGMAN_NODES_MASK,
    IWD,
    REFUSED_ATTRS,
    REWRITTEN_ATTRS,
    SINGULARITY_IMAGE,
)
from lumberjack.ap.job_channels import channel_problem
from lumberjack.ap.job_paths import InputFile, JobRewrite
from lumberjack.ap.names import check_name
from lumberjack.ap.pathmap import PathMap, rewrite_job
from lumberjack.ap.schedd import JOB_PROJECTION, JobAd, LocalSchedd, ads_to_dicts, condor_version
from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw
from lumberjack.core.classad_text import unquote_string
from lumberjack.core.contract import QUEUE_LOG
from lumberjack.core.crashpoints import crash_point
from lumberjack.core.jobstatus import word_of
from lumberjack.core.records import NOT_IN_JSON, JsonRecord
from lumberjack.errors import BadInput, LumberjackError
from lumberjack.host.identity import acting_as, owner_of, user_writable_level

JOB_ID = re.compile(r"^(\d+)(?:\.(\d+))?$")
EXPORTABLE_UNIVERSES = {5}  # vanilla (containers are vanilla jobs with an image)
RUNTIME_ATTRS = ("RequestRuntime", "MaxRuntime", "JobDurationLimit", "AllowedJobDuration")
#: Every attribute rewrite_job reads: a job's rewrite is a function of their texts, the
#: local Iwd and (for local container images) the images' digests.
PATH_MAP_ATTRS = (*REWRITTEN_ATTRS, *CONTROL_ATTRS, *REFUSED_ATTRS, CONTAINER_IMAGE_FULL_PATH,
                  DAGMAN_NODES_MASK)  # fmt: skip
# What a planned rewrite is checked against in the exported log: the Iwd comes apart
# (the schedd's export points the proc's Iwd at its spool; the plan's local Iwd is used).
_COMPARED = tuple(a.lower() for a in PATH_MAP_ATTRS if a != IWD)
_IMAGES = (CONTAINER_IMAGE.lower(), SINGULARITY_IMAGE.lower())


@dataclass(frozen=True)
class Selection:
    constraint: str | None = None
    ids: tuple[str, ...] = ()

    def check(self) -> str:
        """The constraint, checked without a schedd (ids' syntax, the expression parses);
        raises BadInput naming the input."""
        constraint = self.to_constraint()
        if self.constraint:
            import classad2  # late: the bindings are only needed once jobs are selected

            try:
                classad2.ExprTree(constraint)
            except Exception:  # noqa: BLE001  (classad2 raises its own ClassAdException)
                raise BadInput(
                    f"--constraint {constraint!r} is not a ClassAd expression; "
                    """write e.g. -c 'JobBatchName == "calib"'"""
                ) from None
        return constraint

    def to_constraint(self) -> str:
        if bool(self.constraint) == bool(self.ids):
            raise BadInput("select jobs with exactly one of --constraint or --ids")
        if self.constraint:
            return self.constraint
        terms = []
        for job_id in self.ids:
            match = JOB_ID.match(job_id.strip())
            if not match:
                raise BadInput(
                    f"job id {job_id!r} is not CLUSTER or CLUSTER.PROC (e.g. 12 or 12.3)"
                )
            cluster, proc = match.groups()
            term = f"ClusterId == {int(cluster)}"
            terms.append(f"({term} && ProcId == {int(proc)})" if proc is not None else f"({term})")
        return " || ".join(terms)


@dataclass
class Plan(JsonRecord):
    """What an export will do (also what --dry-run prints)."""

    name: str
    owner: str
    clusters: list[int]
    jobs: list[str]
    bundle_dir: Path
    remote_spool: str
    input_files: int
    input_bytes: int
    job_runtimes_s: list[int] = field(default_factory=list, metadata=NOT_IN_JSON)
    # job id -> its planned rewrite, when the bundle may reuse it (see PlannedRewrite)
    rewrites: dict[str, PlannedRewrite] = field(default_factory=dict, metadata=NOT_IN_JSON)
    # job id -> its Iwd on the access point (what the bundle's rewrite is given): with it,
    # nothing of the queried jobs outlives the plan
    local_iwds: dict[str, str] = field(default_factory=dict, metadata=NOT_IN_JSON)


@dataclass(frozen=True)
class PlannedRewrite:
    """A job's rewrite as the plan made it from the queried ad, and what it read: the
    bundle reuses it for the exported job when the exported ad reads the same (one
    rewrite per job instead of two), and rewrites the job again otherwise."""

    local_iwd: str
    texts: tuple[str | None, ...]  # the effective text of each of _COMPARED
    rewrite: JobRewrite

    def fits(self, texts: tuple[str | None, ...], local_iwd: str | None) -> bool:
        return local_iwd == self.local_iwd and texts == self.texts


def path_map_texts(
    cluster_ad: dict[str, str], proc_ad: dict[str, str], lowered_cluster: dict[str, str]
) -> tuple[str | None, ...]:
    """The texts rewrite_job reads (_COMPARED), each the proc's own value, else the
    cluster's, names compared as rewrite_job compares them (str.lower)."""
    proc = {name.lower(): value for name, value in proc_ad.items()}
    return tuple(proc[name] if name in proc else lowered_cluster.get(name) for name in _COMPARED)


def planned_rewrite(job: dict, rewrite: JobRewrite) -> PlannedRewrite | None:
    """What write_bundle may reuse of a job's planned rewrite: not for a job with an
    image (the bundle ships local images by their digest, which the plan does not read),
    nor when the Iwd the plan read is not the one the bundle is given (run_export's)."""
    lowered = {name.lower(): value for name, value in job.texts.items()}
    texts = path_map_texts({}, {}, lowered)
    iwd = str(job.get("Iwd"))
    if any(texts[_COMPARED.index(name)] is not None for name in _IMAGES):
        return None
    if unquote_string(lowered.get(IWD.lower(), "")) != iwd:
        return None
    return PlannedRewrite(iwd, texts, rewrite)


def default_name(site: str | None, taken: Callable[[str], bool] = lambda _: False) -> str:
    """SITE-DATE-TIME, with -2, -3 ... when that name is already in the ledger."""
    base = f"{site or 'bundle'}-{time.strftime('%Y%m%d-%H%M%S')}"
    name, n = base, 1
    while taken(name):
        n += 1
        name = f"{base}-{n}"
    return name


def select_jobs(schedd: LocalSchedd, selection: Selection) -> list[dict]:
    """The jobs the user named, checked; raises BadInput (nothing changed) when any is unfit."""
    return _checked(schedd, selection, schedd.query(selection.to_constraint()))


def select_jobs_with_ads(
    schedd: LocalSchedd, selection: Selection, attrs: Sequence[str]
) -> tuple[list[dict], list[Any]]:
    """select_jobs, and the same jobs' ads as the bindings give them, with `attrs` too
    (matchmaking's): one query of the schedd for both."""
    projection = [*JOB_PROJECTION, *(a for a in attrs if a not in JOB_PROJECTION)]
    ads = schedd.query_ads(selection.to_constraint(), projection)
    return _checked(schedd, selection, ads_to_dicts(ads)), ads


def _checked(schedd: LocalSchedd, selection: Selection, jobs: list[JobAd]) -> list[dict]:
    if not jobs:
        raise BadInput(_nothing_in_queue(schedd, selection))
    if selection.ids:
        _check_ids_found(selection.ids, jobs)
    if not selection.ids or any("." in i for i in selection.ids):
        # Whole clusters named by id were queried whole: no second query of them.
        _check_whole_clusters(schedd, jobs)
    preflight(jobs)
    return sorted(jobs, key=lambda j: (j["ClusterId"], j["ProcId"]))


def _nothing_in_queue(schedd: LocalSchedd, selection: Selection) -> str:
    """Why nothing matched: jobs that already left the queue are named with their state."""
    gone = schedd.history(selection.to_constraint(), ["ClusterId", "ProcId", "JobStatus"], 5)
    if not gone:
        return f"no jobs match {_describe(selection)}"
    states = sorted({word_of(j.get("JobStatus")) if j.get("JobStatus") else "gone" for j in gone})
    ids = ", ".join(sorted(f"{j['ClusterId']}.{j['ProcId']}" for j in gone))
    return (
        f"no job in the queue matches {_describe(selection)}: {ids}"
        f"{' ...' if len(gone) == 5 else ''} left it ({' or '.join(states)}) and cannot be "
        "exported; only idle jobs can"
    )


def _describe(selection: Selection) -> str:
    return (
        f"constraint {selection.constraint!r}"
        if selection.constraint
        else "ids " + " ".join(selection.ids)
    )


def _check_ids_found(ids: tuple[str, ...], jobs: list[dict]) -> None:
    clusters = {j["ClusterId"] for j in jobs}
    procs = {f"{j['ClusterId']}.{j['ProcId']}" for j in jobs}
    missing = [i for i in ids if i not in procs and ("." in i or int(i) not in clusters)]
    if missing:
        raise BadInput(f"no such job in the local queue: {', '.join(missing)}")


def _check_whole_clusters(schedd: LocalSchedd, jobs: list[dict]) -> None:
    # The schedd exports whole clusters; taking 5.3 would silently take 5.0-5.9 too.
    clusters = sorted({j["ClusterId"] for j in jobs})
    selected = {(j["ClusterId"], j["ProcId"]) for j in jobs}
    constraint = " || ".join(f"ClusterId == {c}" for c in clusters)
    everything = schedd.query(constraint, ["ClusterId", "ProcId"])
    left_out = sorted(
        f"{j['ClusterId']}.{j['ProcId']}"
        for j in everything
        if (j["ClusterId"], j["ProcId"]) not in selected
    )
    if left_out:
        shown = ", ".join(left_out[:5]) + (" ..." if len(left_out) > 5 else "")
        raise BadInput(
            f"the schedd exports whole clusters, and the selection leaves out {shown}; "
            "select whole clusters (e.g. --ids 5 rather than --ids 5.3)"
        )


def preflight(jobs: list[dict]) -> None:
    owners = sorted({str(j.get("Owner")) for j in jobs})
    if len(owners) > 1:
        raise BadInput(
            f"the jobs belong to several owners ({', '.join(owners)}); "
            "export one owner's jobs at a time"
        )
    problems = []
    for job in jobs:
        job_id = f"{job['ClusterId']}.{job['ProcId']}"
        if job.get("Managed") == "External":
            problems.append(
                f"{job_id} is already exported (managed by {job.get('ManagedManager')})"
            )
        elif job.get("JobUniverse") not in EXPORTABLE_UNIVERSES:
            # Scheduler and local jobs would run in the site's schedd itself.
            problems.append(
                f"{job_id} is in universe {job.get('JobUniverse')}; only vanilla jobs can move"
            )
        elif job.get("JobStatus") != 1:
            problems.append(f"{job_id} is {word_of(job.get('JobStatus'))}, not idle")
        elif any(
            job.get(a) is not None for a in ("JobMaterializeDigestFile", "JobMaterializeLimit")
        ):
            problems.append(f"{job_id} belongs to a late-materialization factory")
        elif (channel := channel_problem(job)) is not None:
            problems.append(f"{job_id}: {channel}")
        if len(problems) >= 5:
            break
    if problems:
        raise BadInput("cannot export: " + "; ".join(problems))


def runtimes_s(jobs: list[dict]) -> list[int]:
    """Requested runtimes the jobs carry, for the walltime suggestion."""
    found = []
    for job in jobs:
        for attr in RUNTIME_ATTRS:
            value = job.get(attr)
            if isinstance(value, (int, float)) and value > 0:
                found.append(int(value))
                break
    return found


def plan_export(
    schedd: LocalSchedd,
    selection: Selection,
    *,
    name: str,
    bundle_dir: Path,
    remote_spool: str,
    selected: list[dict] | None = None,
) -> tuple[Plan, PathMap]:
    """Everything that can refuse, with no change anywhere. `selected`: the jobs of
    `selection` as select_jobs gave them to the caller (else they are selected here).
    The plan holds all the export needs of the jobs: a caller that lets go of them
    frees their ads (a few KB a job) before the bundle is written."""
    check_name(name)
    if not posixpath.isabs(remote_spool):
        raise BadInput(f"remote spool {remote_spool!r} must be an absolute path")
    jobs = selected if selected is not None else select_jobs(schedd, selection)
    owner = str(jobs[0]["Owner"])
    bundle_home.check_bundle_dir(bundle_dir, owner)
    path_map = PathMap(remote_spool)
    rewrites = {}
    for job in jobs:
        # The jobs' effective ads stand in for cluster+proc ads: same answers, no change.
        rewrite = rewrite_job(job["ClusterId"], job["ProcId"], job.texts, {}, remote_spool)
        path_map.add(rewrite)
        planned = planned_rewrite(job, rewrite)
        if planned is not None:
            rewrites[f"{job['ClusterId']}.{job['ProcId']}"] = planned
    inputs = [item.to_json() for item in path_map.inputs.values()]
    files, size = as_user.call_as(owner, check_inputs_json, {"inputs": inputs})
    plan = Plan(
        name=name,
        owner=owner,
        clusters=sorted({j["ClusterId"] for j in jobs}),
        jobs=[f"{j['ClusterId']}.{j['ProcId']}" for j in jobs],
        bundle_dir=bundle_dir,
        remote_spool=path_map.remote_spool,
        input_files=files,
        input_bytes=size,
        job_runtimes_s=runtimes_s(jobs),
        rewrites=rewrites,
        local_iwds={f"{j['ClusterId']}.{j['ProcId']}": str(j["Iwd"]) for j in jobs},
    )
    return plan, path_map


ProgressCallback = Callable[[int], None]


def check_inputs_json(inputs: list[dict], progress: ProgressCallback | None = None) -> list[int]:
    """[files, bytes] of the inputs; BadInput for the first one that is missing or that
    this process cannot open (run as the job's owner: see as_user)."""
    count = size = 0
    for data in inputs:
        local = data["local_path"]
        for path, _ in input_files(local):
            count += 1
            size += _readable_size(path)
    return [count, size]


def input_files(local: str) -> list[tuple[str, str]]:
    """(path, path relative to `local`) of the regular files an input stands for: itself,
    or those below it (symlinked directories are not entered; dangling links, FIFOs and
    devices are no inputs). Symlinks are followed with this process's identity."""
    try:
        top = os.stat(local)
    except FileNotFoundError:
        raise BadInput(f"input file {local} does not exist") from None
    except OSError as exc:
        raise BadInput(f"input file {local} is not readable: {exc.strerror}") from None
    if not stat.S_ISDIR(top.st_mode):
        return [(local, "")]

    def fail(exc: OSError) -> None:
        raise BadInput(f"input directory {local}: cannot read {exc.filename}: {exc.strerror}")

    found = []
    for directory, _, names in os.walk(local, onerror=fail):
        for name in names:
            path = os.path.join(directory, name)
            try:
                mode = os.stat(path).st_mode
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise BadInput(f"input file {path} is not readable: {exc.strerror}") from None
            if stat.S_ISREG(mode):
                found.append((path, os.path.relpath(path, local)))
    return sorted(found, key=lambda pair: pair[1])


def input_dirs(path_map: PathMap, spool_dir: Path) -> list[str]:
    """Every directory an input stands for (itself and those below it, empty ones too),
    relative to the spool, made in the bundle's spool mirror: HTCondor transfers a
    directory with its empty subdirectories, and the site makes them from the manifest
    (files alone would not make an empty one)."""
    dirs: set[str] = set()
    for item in path_map.inputs.values():
        if item.sha256 or not os.path.isdir(item.local_path):
            continue
        relative = posixpath.relpath(item.remote_path, path_map.remote_spool)
        for directory, _, _ in os.walk(item.local_path):
            below = os.path.relpath(directory, item.local_path)
            dirs.add(relative if below == "." else posixpath.join(relative, below))
    for relative in dirs:
        (spool_dir / relative).mkdir(parents=True, exist_ok=True)
    return sorted(dirs)


def _readable_size(path: str) -> int:
    # Opened, not only stat'ed: what counts is whether this identity may read it.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise BadInput(f"input file {path} is not readable: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(info.st_mode):
        raise BadInput(f"input file {path} is not a regular file")
    return info.st_size


def write_bundle_json(
    plan: dict[str, Any],
    native_log: str,
    local_iwds: dict[str, str],
    site: str | None,
    progress: ProgressCallback | None = None,
    rewrites: dict[str, PlannedRewrite] | None = None,
) -> Any:
    """write_bundle with JSON arguments (for as_user; `rewrites`, the plan's, reach its
    forked child as they are); only the counts come back, since the manifest of 100,000
    jobs is large and is on disk, and the sha256 and size of the manifest as written
    (read back here, as the owner: root never opens it by path)."""
    written = Plan.from_json(plan)
    manifest = write_bundle(
        written, Path(native_log), local_iwds, site=site, progress=progress, rewrites=rewrites,
    )  # fmt: skip
    data = bundle_mod.read_manifest_bytes(written.bundle_dir)
    digest = hashlib.sha256(data).hexdigest()
    return {"files": len(manifest.files), "bytes": manifest.total_bytes(),
            "manifest_sha256": digest, "manifest_bytes": len(data)}  # fmt: skip


def write_bundle(
    plan: Plan,
    native_log: Path,
    local_iwds: dict[str, str],
    *,
    site: str | None,
    progress: ProgressCallback | None = None,
    rewrites: dict[str, PlannedRewrite] | None = None,
) -> bundle_mod.Manifest:
    """Rewrite the schedd's exported log for the remote SPOOL and gather the input files.

    `rewrites`: the plan's (Plan.rewrites), each reused for a job whose exported ad
    reads as the planned one did; every other job is rewritten here."""
    ads = bundle_mod.read_queue_log(native_log)  # what the schedd wrote, as the owner
    clusters = {
        jql.parse_key(k).cluster: ad for k, ad in ads.items() if jql.key_kind(k) == "cluster"
    }
    lowered = {c: {n.lower(): v for n, v in ad.attrs.items()} for c, ad in clusters.items()}
    rewrites = rewrites or {}
    path_map = PathMap(plan.remote_spool)
    image_digest = ImageDigests()
    for key, ad in ads.items():
        if jql.key_kind(key) != "proc":
            continue
        job = jql.parse_key(key)
        cluster_ad = clusters.get(job.cluster)
        if cluster_ad is None:
            raise LumberjackError(f"exported log has proc {key} without its cluster ad")
        local_iwd = local_iwds.get(key)
        planned = rewrites.get(key)
        if planned is not None and planned.fits(
            path_map_texts(cluster_ad.attrs, ad.attrs, lowered[job.cluster]), local_iwd
        ):
            rewrite = planned.rewrite  # the same texts: rewrite_job's same answer
        else:
            rewrite = rewrite_job(
                job.cluster, job.proc, cluster_ad.attrs, ad.attrs, plan.remote_spool,
                local_iwd=local_iwd, image_digest=image_digest,
            )  # fmt: skip
        path_map.add(rewrite)
        for attr, value in rewrite.proc_overrides.items():
            ad.set(attr, value)

    spool_dir = plan.bundle_dir / bundle_mod.SPOOL
    entries = copy_inputs(path_map, spool_dir, progress)
    dirs = input_dirs(path_map, spool_dir)
    jqlw.write_log(spool_dir / QUEUE_LOG, ads)
    del ads, clusters  # the queue is written: its memory goes to the manifest's JSON
    entries.append(bundle_mod.entry_for(spool_dir, QUEUE_LOG))
    crash_point("export.before-manifest")
    manifest = bundle_mod.Manifest(
        name=plan.name,
        owner=plan.owner,
        remote_spool=plan.remote_spool,
        condor_version=condor_version(),
        lumberjack_version=__version__,
        clusters=plan.clusters,
        jobs=plan.jobs,
        files=sorted(entries, key=lambda e: e.path),
        dirs=dirs,
        path_map=path_map.to_json(),
        site=site,
    )
    del path_map  # the manifest holds its JSON: the records' memory goes to writing it
    bundle_mod.write_manifest(plan.bundle_dir, manifest)
    return manifest


class ImageDigests:
    """sha256 of each local container image, read once (as the owner, like every input)."""

    def __init__(self) -> None:
        self._known: dict[str, str] = {}

    def __call__(self, local: str) -> str:
        if local not in self._known:
            try:
                self._known[local] = bundle_mod.sha256_file(Path(local))
            except OSError as exc:
                raise BadInput(f"cannot read container image {local}: {exc.strerror}") from exc
        return self._known[local]


def copy_inputs(
    path_map: PathMap, spool_dir: Path, progress: ProgressCallback | None = None
) -> list[bundle_mod.FileEntry]:
    """Copy every input once into the bundle's spool mirror; hash while copying. A
    container image goes once per content however many paths name it."""
    entries = []
    images: set[str] = set()
    for item in path_map.inputs.values():
        if item.sha256:
            if item.remote_path not in images:
                images.add(item.remote_path)
                entries.append(_copy_image(item, path_map.remote_spool, spool_dir, progress))
            continue
        relative = posixpath.relpath(item.remote_path, path_map.remote_spool)
        sources = [
            (Path(path), posixpath.join(relative, below) if below else relative)
            for path, below in input_files(item.local_path)
        ]
        for src, rel in sources:
            try:
                size, digest = bundle_mod.copy_hashed(src, spool_dir / rel)
            except OSError as exc:
                raise BadInput(f"cannot read input file {src}: {exc.strerror}") from exc
            entries.append(bundle_mod.FileEntry(rel, size, digest, os.access(src, os.X_OK)))
            if len(entries) == 1:
                crash_point("export.mid-copy")
            if progress:
                progress(size)
    return entries


def _copy_image(
    item: InputFile, remote_spool: str, spool_dir: Path, progress: ProgressCallback | None
) -> bundle_mod.FileEntry:
    """The image into the bundle under its digest; refused if it changed since it was
    hashed (its jobs were pointed at that digest)."""
    relative = posixpath.relpath(item.remote_path, remote_spool)
    try:
        size, digest = bundle_mod.copy_hashed(Path(item.local_path), spool_dir / relative)
    except OSError as exc:
        raise BadInput(f"cannot read container image {item.local_path}: {exc.strerror}") from exc
    if digest != item.sha256:
        raise BadInput(f"container image {item.local_path} changed while it was exported")
    if progress:
        progress(size)
    return bundle_mod.FileEntry(relative, size, digest, False)


def remove_bundle(bundle_dir: Path, owner: str | None = None) -> None:
    """Remove a bundle: its contents as the owner (whose files they are), then, where no
    user can change the path to it (root's bundles dir), what is left as root: the
    directory itself, or an older version's root-owned import state."""
    try:
        with acting_as(owner_of(owner) if owner else None):
            shutil.rmtree(bundle_dir, ignore_errors=True)
    except BadInput:
        pass  # the owner has no account any more
    if os.geteuid() != 0 or user_writable_level(bundle_dir.parent) is None:
        shutil.rmtree(bundle_dir, ignore_errors=True)  # never follows a link it finds
