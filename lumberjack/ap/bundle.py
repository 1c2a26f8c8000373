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
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lumberjack.core import jobqueuelog as jql
from lumberjack.core.manifest import (
    MANIFEST,
    FileEntry,
    Manifest,
    ManifestError,
    parse_manifest,
)
from lumberjack.errors import BadInput
from lumberjack.host.bounded_read import open_regular, read_regular
from lumberjack.host.identity import Owner
from lumberjack.host.input_paths import check_relative

__all__ = ["MANIFEST", "FileEntry", "Manifest", "load_manifest", "write_manifest"]

SPOOL = "spool"
NATIVE = "native"
CHUNK = 1 << 20
#: The largest manifest read when no ledger records its size (the owner can replace it).
MAX_MANIFEST_BYTES = 1 << 30
#: The largest queue log read from a bundle (native/ or spool/ job_queue.log).
MAX_QUEUE_BYTES = 4 << 30


def write_manifest(bundle_dir: Path, manifest: Manifest) -> Path:
    target = bundle_dir / MANIFEST
    # No indent: json's C encoder only runs without one (5x faster on 100,000 jobs).
    write_atomic(target, json.dumps(manifest.to_json(), sort_keys=True).encode(), mode=0o600)
    return target


def load_manifest(bundle_dir: Path, owner: Owner | None = None) -> Manifest:
    return parse_manifest_bytes(bundle_dir, read_manifest_bytes(bundle_dir, owner=owner))


@dataclass(frozen=True)
class ReadManifest:
    """A manifest and the bytes it was parsed from: a check of their sha256 vouches for
    this very manifest (read and parsed once)."""

    data: bytes
    manifest: Manifest


def read_manifest_once(
    bundle_dir: Path, size: int | None = None, owner: Owner | None = None
) -> ReadManifest:
    data = read_manifest_bytes(bundle_dir, size, owner)
    return ReadManifest(data, parse_manifest_bytes(bundle_dir, data))


def read_manifest_bytes(
    bundle_dir: Path, size: int | None = None, owner: Owner | None = None
) -> bytes:
    """The manifest file's bytes (what its sha256 is taken of), read as `owner` and no
    more than `size` (the ledger's record of it; else MAX_MANIFEST_BYTES)."""
    path = bundle_dir / MANIFEST
    try:
        return read_regular(path, "manifest", size or MAX_MANIFEST_BYTES, owner)
    except FileNotFoundError as exc:
        raise BadInput(f"{bundle_dir}: no {MANIFEST}; not a complete lumberjack bundle") from exc


def parse_manifest_bytes(bundle_dir: Path, data: bytes) -> Manifest:
    path = bundle_dir / MANIFEST
    try:
        manifest = parse_manifest(json.loads(data), str(path))
    except ValueError as exc:  # not JSON, not UTF-8
        raise BadInput(f"{path}: unreadable manifest ({exc})") from exc
    except ManifestError as exc:
        raise BadInput(str(exc)) from exc
    for entry in manifest.files:
        check_relative(entry.path, str(path))
    return manifest


def read_queue_log(path: Path, owner: Owner | None = None) -> dict[str, jql.Ad]:
    """The ads of a queue log in a bundle, the way jobqueuelog.read_log gives them, read
    as `owner` through bounded_read (a link, FIFO or device there is refused)."""
    with open_regular(path, "queue log", MAX_QUEUE_BYTES, owner) as handle:
        return jql.replay(jql.parse_file(handle, str(path)), source=str(path))


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
    """sha256 of a regular file (followed as this process may: an image the owner names);
    BadInput for anything else (non-blocking: a FIFO put there must not hang)."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadInput(f"{path} is not a regular file")
        os.set_blocking(fd, True)
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def copy_hashed(source: Path, target: Path) -> tuple[int, str]:
    """Copy a regular file and hash it in one pass; keep the owner's bits only (the
    executable bit moves, nobody else may read the copy)."""
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    tmp = target.with_name(f".{target.name}.part")
    # Non-blocking: a FIFO put in place of an input must not hang the export.
    fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with os.fdopen(fd, "rb") as src:
        info = os.fstat(src.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(f"input file {source} is not a regular file")
        os.set_blocking(fd, True)
        with open(tmp, "wb") as dst:
            for chunk in iter(lambda: src.read(CHUNK), b""):
                digest.update(chunk)
                dst.write(chunk)
                size += len(chunk)
    os.chmod(tmp, stat.S_IMODE(info.st_mode) & 0o700)
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
