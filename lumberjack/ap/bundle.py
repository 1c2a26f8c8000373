"""The bundle: an export's files on disk, and the manifest that vouches for them.

    BUNDLE/manifest.json         sizes + sha256 of every file, path map, versions, job ids
    BUNDLE/spool/job_queue.log   the queue, every path rewritten for the remote SPOOL
    BUNDLE/spool/lumberjack-inputs/<absolute local path>   the jobs' input files
    BUNDLE/native/job_queue.log  what the schedd's export_jobs wrote (kept for the record)

`spool/` mirrors the remote SPOOL one to one, so shipping is a copy of that tree.
The manifest is written last and atomically: a bundle without one is incomplete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lumberjack.core.safepath import why_unsafe
from lumberjack.errors import BadInput

MANIFEST = "manifest.json"
SPOOL = "spool"
NATIVE = "native"
FORMAT = "condor-lumberjack-bundle/1"
CHUNK = 1 << 20


@dataclass(frozen=True)
class FileEntry:
    """One file of bundle/spool: path relative to it, size, sha256, executable bit."""

    path: str
    size: int
    sha256: str
    executable: bool = False


@dataclass
class Manifest:
    name: str
    owner: str
    remote_spool: str
    condor_version: str
    lumberjack_version: str
    clusters: list[int]
    jobs: list[str]
    files: list[FileEntry]
    path_map: dict[str, Any]
    site: str | None = None
    created: float = field(default_factory=time.time)
    format: str = FORMAT

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["files"] = [asdict(f) for f in self.files]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str) -> Manifest:
        try:
            if data.get("format") != FORMAT:
                raise ValueError(f"unknown format {data.get('format')!r}")
            files = [FileEntry(**entry) for entry in data["files"]]
            fields = {k: v for k, v in data.items() if k != "files"}
            manifest = cls(files=files, **fields)
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput(f"{source}: not a lumberjack manifest ({exc})") from exc
        for entry in manifest.files:
            check_relative(entry.path, source)
        return manifest

    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def check_relative(path: str, source: str) -> str:
    """Refuse a bundle path that could point outside the bundle."""
    if why_unsafe(path) is not None:
        raise BadInput(f"{source}: unsafe path {path!r}")
    return path


def write_manifest(bundle_dir: Path, manifest: Manifest) -> Path:
    target = bundle_dir / MANIFEST
    write_atomic(target, json.dumps(manifest.to_json(), indent=1, sort_keys=True).encode())
    return target


def load_manifest(bundle_dir: Path) -> Manifest:
    path = bundle_dir / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise BadInput(f"{bundle_dir}: no {MANIFEST}; not a complete lumberjack bundle") from exc
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: unreadable manifest ({exc})") from exc
    return Manifest.from_json(data, str(path))


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write a whole file or nothing: temp file in the same directory, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def copy_hashed(source: Path, target: Path) -> tuple[int, str]:
    """Copy a file and hash it in one pass; keep the executable bits."""
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    tmp = target.with_name(f".{target.name}.part")
    with open(source, "rb") as src, open(tmp, "wb") as dst:
        for chunk in iter(lambda: src.read(CHUNK), b""):
            digest.update(chunk)
            dst.write(chunk)
            size += len(chunk)
    shutil.copymode(source, tmp)
    os.replace(tmp, target)
    return size, digest.hexdigest()


def entry_for(spool_dir: Path, relative: str) -> FileEntry:
    path = spool_dir / relative
    return FileEntry(relative, path.stat().st_size, sha256_file(path), os.access(path, os.X_OK))


def verify_files(spool_dir: Path, files: list[FileEntry]) -> list[str]:
    """Every problem with the files against the manifest (empty: all good)."""
    problems = []
    for entry in files:
        path = spool_dir / entry.path
        if path.is_symlink() or not path.is_file():
            problems.append(f"{entry.path}: missing")
        elif path.stat().st_size != entry.size:
            problems.append(f"{entry.path}: size {path.stat().st_size} != {entry.size}")
        elif sha256_file(path) != entry.sha256:
            problems.append(f"{entry.path}: sha256 mismatch")
    return problems
