"""The records of one job's path rewrite: what to ship, and what import must know.

``InputFile`` and ``JobPaths`` are stored in the bundle's manifest (through the path map);
``JobRewrite`` is what ``rewrite_job`` hands export for one proc.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from lumberjack.ap.path_text import norm_abs
from lumberjack.core.message_text import shown
from lumberjack.core.records import JsonRecord, RecordError, from_json
from lumberjack.errors import BadInput


def malformed(why: str) -> BadInput:
    """The one-line refusal of a stored path map that does not hold together."""
    return BadInput(f"path map is malformed: {why}")


@dataclass(frozen=True)
class InputFile(JsonRecord):
    """One input to ship: the local file or directory, its place at the site and in the bundle.

    ``is_dir`` is True when some job named it with a trailing ``/``; False does not prove
    it is a file (the path map never looks at the disk).
    """

    local_path: str
    remote_path: str
    bundle_path: str
    is_dir: bool = False
    sha256: str = ""  # a container image shipped by content (remote_path: its image_path)


@dataclass
class JobPaths(JsonRecord):
    """What the import side needs to know about one job's paths (stored in the manifest).

    Paths are absolute local paths, lexically normalised, or ``/dev/null``; None when the
    job did not set the attribute.
    """

    cluster: int
    proc: int
    local_iwd: str
    remote_iwd: str
    # canonical attribute name -> original effective expression text, for every change
    original: dict[str, str] = field(default_factory=dict)
    # attributes set at the site that had no value locally (delete them to reverse)
    unset: list[str] = field(default_factory=list)
    out: Optional[str] = None
    err: Optional[str] = None
    user_log: Optional[str] = None
    dagman_nodes_log: Optional[str] = None
    # the event numbers DAGManNodesLog takes (DAGManNodesMask), None: every event
    dagman_nodes_mask: Optional[list[int]] = None
    remaps: list[tuple[str, str]] = field(default_factory=list)
    # original TransferOutput expression text (not rewritten; the site's copy is not trusted)
    transfer_output: Optional[str] = None
    preserve_relative_paths: bool = False
    # names the job's inputs take in the sandbox (never mistaken for outputs)
    input_names: list[str] = field(default_factory=list)

    @property
    def job_id(self) -> str:
        return f"{self.cluster}.{self.proc}"

    def reverse_overrides(self) -> tuple[dict[str, str], list[str]]:
        """(attributes to set back in the proc ad, attributes to delete from it)."""
        return dict(self.original), list(self.unset)

    @classmethod
    def from_json(cls, data: Any, where: str = "job") -> JobPaths:
        try:
            job = from_json(cls, data, where)
        except RecordError as exc:
            raise malformed(str(exc)) from None
        if job.cluster < 0 or job.proc < 0:
            raise malformed(f"job {job.job_id}: cluster and proc must not be negative")
        for what, path in (
            ("local_iwd", job.local_iwd),
            ("out", job.out),
            ("err", job.err),
            ("user_log", job.user_log),
            ("dagman_nodes_log", job.dagman_nodes_log),
        ):
            if path is not None and (not path.startswith("/") or norm_abs(path, what) != path):
                raise malformed(f"job {job.job_id}: {what} {shown(path)} is not normalised")
        return job


@dataclass
class JobRewrite:
    """The result of ``rewrite_job`` for one proc."""

    cluster: int
    proc: int
    proc_overrides: dict[str, str]
    inputs: list[InputFile]
    original: dict[str, str]
    unset: list[str]
    local_iwd: str
    remote_iwd: str
    paths: JobPaths
