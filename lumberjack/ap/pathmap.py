"""The export's path map: every job's paths rewritten for the site, reversibly.

``rewrite_job`` computes, for one proc, the overrides that make it runnable from the
site's spool (path_rules.py, one rule per attribute; image_paths.py for container
images) and what import needs to put the job back (job_paths.JobPaths); ``PathMap``
gathers the rewrites of one export, ships each input once, and maps paths both ways
(remote_layout.py says where things live). It is stored in the bundle's manifest.json.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from lumberjack.ap import path_rules
from lumberjack.ap.image_paths import local_images, rewrite_images, shipped_by_content
from lumberjack.ap.job_attrs import PRESERVE_RELATIVE_PATHS, TRANSFER_OUTPUT
from lumberjack.ap.job_paths import InputFile, JobPaths, JobRewrite, malformed
from lumberjack.ap.path_text import join, norm_abs, relative_to
from lumberjack.ap.proc_rewriter import ProcAds, ProcRewriter
from lumberjack.ap.remote_layout import (
    bundle_path,
    inputs_root,
    mirror_path,
    norm_spool,
    proc_spool_dir,
)
from lumberjack.core.images import image_path, is_digest
from lumberjack.core.message_text import shown
from lumberjack.core.records import RecordError, from_json, to_json
from lumberjack.errors import BadInput


def rewrite_job(
    cluster: int,
    proc: int,
    cluster_ad: Mapping[str, str],
    proc_ad: Mapping[str, str],
    remote_spool: str,
    local_iwd: Optional[str] = None,
    image_digest: Optional[Callable[[str], str]] = None,
) -> JobRewrite:
    """Compute the proc-ad overrides that make one job runnable from the site's spool.

    ``local_iwd`` overrides what the ads say about the job's original Iwd (needed when the
    native export has already rewritten the proc ad's Iwd to a spool path); ``image_digest``
    gives an image's sha256. Raises BadInput for jobs lumberjack cannot move; changes nothing.
    """
    rw = ProcRewriter(cluster, proc, ProcAds(cluster_ad, proc_ad), norm_spool(remote_spool))
    path_rules.refuse_unsupported(rw)
    iwd, remote_iwd = path_rules.rewrite_iwd(rw, cluster, proc, local_iwd)
    preserve = rw.flag(PRESERVE_RELATIVE_PATHS, False)
    images = local_images(rw, iwd)
    by_content = shipped_by_content(rw, images) if image_digest else set()
    path_rules.rewrite_cmd(rw, iwd)
    path_rules.rewrite_transfer_input(rw, iwd, preserve, by_content)
    path_rules.rewrite_single_inputs(rw, iwd)
    rewrite_images(rw, images, by_content, image_digest)
    out, err = path_rules.rewrite_std_streams(rw, iwd)
    user_log, dagman_nodes_log = path_rules.rewrite_logs(rw, iwd, remote_iwd)
    remaps = path_rules.rewrite_remaps(rw)
    path_rules.rewrite_should_transfer(rw)

    paths = JobPaths(
        cluster=cluster,
        proc=proc,
        local_iwd=iwd,
        remote_iwd=remote_iwd,
        original=dict(rw.original),
        unset=list(rw.unset),
        out=out,
        err=err,
        user_log=user_log,
        dagman_nodes_log=dagman_nodes_log,
        dagman_nodes_mask=path_rules.nodes_mask(rw) if dagman_nodes_log else None,
        remaps=remaps,
        transfer_output=rw.ads.text(TRANSFER_OUTPUT),
        preserve_relative_paths=preserve,
        input_names=rw.sandbox_names(),
    )
    return JobRewrite(
        cluster=cluster,
        proc=proc,
        proc_overrides=rw.overrides,
        inputs=list(rw.inputs.values()),
        original=dict(rw.original),
        unset=list(rw.unset),
        local_iwd=iwd,
        remote_iwd=remote_iwd,
        paths=paths,
    )


@dataclass
class PathMap:
    """All jobs' rewrites of one export; stored in the bundle's manifest.json."""

    remote_spool: str
    jobs: dict[str, JobPaths] = field(default_factory=dict)
    # every input to ship, once, by local path
    inputs: dict[str, InputFile] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.remote_spool = norm_spool(self.remote_spool)

    @property
    def inputs_root(self) -> str:
        return inputs_root(self.remote_spool)

    def add(self, rewrite: JobRewrite) -> None:
        """Record one job's rewrite (again: replaces the earlier record)."""
        expected = proc_spool_dir(self.remote_spool, rewrite.cluster, rewrite.proc)
        if rewrite.remote_iwd != expected:
            raise BadInput(
                f"job {rewrite.cluster}.{rewrite.proc} was rewritten for another remote spool"
            )
        self.jobs[rewrite.paths.job_id] = rewrite.paths
        for item in rewrite.inputs:
            known = self.inputs.get(item.local_path)
            if known is not None and known.is_dir and not item.is_dir:
                item = known
            self.inputs[item.local_path] = item

    def job(self, cluster: int, proc: int) -> JobPaths:
        try:
            return self.jobs[f"{cluster}.{proc}"]
        except KeyError:
            raise BadInput(f"job {cluster}.{proc} is not in this export's path map") from None

    def local_to_remote(self, path: str, job: Optional[tuple[int, int]] = None) -> str:
        """The site's path for an absolute local path.

        Without ``job``: its place in the inputs mirror. With ``job=(cluster, proc)``: a path
        inside that job's local Iwd maps into its remote Iwd.
        """
        local = norm_abs(path, "local path")
        if job is not None:
            paths = self.job(*job)
            rel = relative_to(local, paths.local_iwd)
            if rel is None:
                raise BadInput(f"{shown(local)} is not inside job {paths.job_id}'s Iwd")
            return join(paths.remote_iwd, rel)
        return mirror_path(self.remote_spool, local)

    def remote_to_local(self, path: str) -> str:
        """The local path for a path in the inputs mirror or in a job's remote Iwd."""
        remote = norm_abs(path, "remote path")
        rel = relative_to(remote, self.inputs_root)
        if rel is not None:
            return "/" + rel
        rel = relative_to(remote, self.remote_spool)
        if rel:
            parts = rel.split("/", 3)
            if len(parts) >= 3:
                c, p, leaf = parts[0], parts[1], parts[2]
                if leaf == f"cluster{c}.proc{p}.subproc0" and f"{c}.{p}" in self.jobs:
                    paths = self.jobs[f"{c}.{p}"]
                    rest = parts[3] if len(parts) == 4 else ""
                    return join(paths.local_iwd, rest)
        raise BadInput(f"{shown(remote)} is not a path this export maps")

    def to_json(self) -> dict[str, Any]:
        return {
            "format": 1,
            "remote_spool": self.remote_spool,
            "inputs": [to_json(self.inputs[k]) for k in sorted(self.inputs)],
            "jobs": {k: to_json(self.jobs[k]) for k in sorted(self.jobs, key=_job_sort_key)},
        }

    @classmethod
    def from_json(cls, data: Any) -> PathMap:
        d = _as_dict(data, "path map")
        if d.get("format") != 1:
            raise malformed(f"unknown format {d.get('format')!r}")
        pm = cls(remote_spool=_get_str(d, "remote_spool"))
        inputs_raw = d.get("inputs", [])
        if not isinstance(inputs_raw, list):
            raise malformed("inputs is not a list")
        for raw in inputs_raw:
            try:
                item = from_json(InputFile, raw, "input")
            except RecordError as exc:
                raise malformed(str(exc)) from None
            if item.sha256 and not is_digest(item.sha256):
                raise malformed(f"input {shown(item.local_path)} has a malformed sha256")
            expected = (
                image_path(pm.remote_spool, item.sha256)
                if item.sha256
                else mirror_path(pm.remote_spool, item.local_path)
            )
            if item.remote_path != expected:
                raise malformed(f"input {shown(item.local_path)} is not mirrored as expected")
            if item.bundle_path != bundle_path(item.local_path):
                raise malformed(f"input {shown(item.local_path)} has a wrong bundle path")
            pm.inputs[item.local_path] = item
        jobs_raw = _as_dict(d.get("jobs", {}), "jobs")
        for key, raw in jobs_raw.items():
            job = JobPaths.from_json(raw)
            if key != job.job_id:
                raise malformed(f"job key {key!r} does not match {job.job_id}")
            if job.remote_iwd != proc_spool_dir(pm.remote_spool, job.cluster, job.proc):
                raise malformed(f"job {job.job_id} has an unexpected remote Iwd")
            pm.jobs[key] = job
        return pm


def _job_sort_key(key: str) -> tuple[int, int]:
    c, _, p = key.partition(".")
    try:
        return int(c), int(p)
    except ValueError:
        return (0, 0)


def _as_dict(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise malformed(f"{what} is not an object")
    return data


def _get_str(d: Mapping[str, Any], key: str) -> str:
    v = d.get(key)
    if not isinstance(v, str):
        raise malformed(f"{key} is missing or not a string")
    return v
