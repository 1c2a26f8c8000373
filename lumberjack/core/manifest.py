"""manifest.json: what a bundle holds (every file's size and sha256, the path map, the
versions, the jobs). Written on the access point, read on both sides."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from lumberjack.core.records import JsonRecord, RecordError, from_json

MANIFEST = "manifest.json"
FORMAT = "condor-lumberjack-bundle/1"


class ManifestError(ValueError):
    """Not a manifest this version can read; the message names the file."""


@dataclass(frozen=True)
class FileEntry(JsonRecord):
    """One file of bundle/spool: path relative to it, size, sha256, executable bit."""

    path: str
    size: int
    sha256: str
    executable: bool = False


@dataclass
class Manifest(JsonRecord):
    name: str
    owner: str
    remote_spool: str
    condor_version: str
    lumberjack_version: str
    clusters: list[int]
    jobs: list[str]
    files: list[FileEntry]
    path_map: dict[str, Any]
    site: Optional[str] = None
    created: float = field(default_factory=time.time)
    #: Directories of the inputs, relative to the spool, empty ones too (the site makes
    #: them: a directory input is transferred with its empty subdirectories).
    dirs: list[str] = field(default_factory=list)
    format: str = FORMAT

    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def remote_iwds(self) -> list[str]:
        """Each job's working directory at the site (the path map's remote_iwd)."""
        return [job["remote_iwd"] for job in self.path_map.get("jobs", {}).values()]


def parse_manifest(data: Any, source: str) -> Manifest:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ManifestError(f"{source}: not a lumberjack manifest (unknown format {found!r})")
    try:
        return from_json(Manifest, data, "manifest")
    except RecordError as exc:
        raise ManifestError(f"{source}: not a lumberjack manifest ({exc})") from exc


def read_manifest(path: Path) -> Manifest:
    """The manifest at `path` (FileNotFoundError when there is none)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{path}: unreadable manifest ({exc})") from exc
    return parse_manifest(data, str(path))
