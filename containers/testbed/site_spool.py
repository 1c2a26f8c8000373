"""Installing a bundle's spool as a schedd's SPOOL, and collecting it back.

Runs where the remote schedd runs (the site's login node, or the local round trip's
second pool), so it is stdlib only. The schedd reads job_queue.log as its own account;
each job's working directory must exist and belong to the account the jobs run as.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lumberjack.core.manifest import read_manifest

QUEUE_LOG = "job_queue.log"


def install_spool(
    bundle_spool: Path,
    spool: Path,
    remote_iwds: list[str],
    *,
    schedd_ids: tuple[int, int] | None = None,
    job_ids: tuple[int, int] | None = None,
) -> None:
    """Copy the bundle's spool tree into `spool` and make each job's Iwd.

    Idempotent: files already there with the same size are kept (resumed shipping puts
    them there); job_queue.log is copied last, so a schedd never sees a queue whose
    inputs are missing.
    """
    spool.mkdir(parents=True, exist_ok=True)
    for source in sorted(bundle_spool.rglob("*")):
        relative = source.relative_to(bundle_spool)
        if source.is_dir() or relative.as_posix() == QUEUE_LOG:
            continue
        target = spool / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.stat().st_size != source.stat().st_size:
            shutil.copy2(source, target)
    for iwd in remote_iwds:
        path = Path(iwd)
        path.mkdir(parents=True, exist_ok=True)
        if job_ids is not None:
            os.chown(path, *job_ids)
    _make_readable(spool / "lumberjack-inputs")
    target = spool / QUEUE_LOG
    shutil.copy2(bundle_spool / QUEUE_LOG, target)
    os.chmod(target, 0o600)
    if schedd_ids is not None:
        os.chown(target, *schedd_ids)
        os.chown(spool, *schedd_ids)


def _make_readable(root: Path) -> None:
    # The shadow reads inputs as the job's account: directories traversable, files readable.
    if not root.exists():
        return
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        os.chmod(path, mode | (0o755 if path.is_dir() else 0o644))


def remote_iwds_from_manifest(manifest_path: Path) -> list[str]:
    return read_manifest(manifest_path).remote_iwds()
