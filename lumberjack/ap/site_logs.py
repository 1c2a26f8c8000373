"""Site logs at home: fetched beside the returned spool, read back as hostile text.

The site agent gathers them when it stops an export (site/gather_logs.py). `fetch`
brings them into this account's work dir for the export (site-logs/, 0700) through the
same checked download as the results, with caps of their own: no file over
SiteLogs.FILE_MAX (core/contract.py), no more than TOTAL bytes or MAX_FILES files;
links, special files and unsafe names are skipped. A refused or missing set of logs
never fails the fetch: the answer says why. `condor_lumberjack logs` reads them again as
hostile: regular files of one name only, within the cap, every control character but
newline and tab replaced.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any, Protocol

from lumberjack.core.contract import SiteLogs
from lumberjack.core.message_text import printable
from lumberjack.core.returns import Limits
from lumberjack.errors import BadInput, LumberjackError

#: What a fetch takes at most (a little over what the agent writes: its own caps).
TOTAL = SiteLogs.TOTAL_MAX + (1 << 20)
MAX_FILES = 100_000
LIMITS = Limits(
    job_bytes=SiteLogs.FILE_MAX, total_bytes=TOTAL, job_files=MAX_FILES,
    job_bytes_var="the site logs' cap per file", total_bytes_var="the site logs' TOTAL cap",
    job_files_var="the site logs' cap on files",
)  # fmt: skip
_JOB_ID = re.compile(r"[0-9]{1,10}\.[0-9]{1,10}")


class Downloads(Protocol):
    def download(self, remote_root: str, local_root: Path, **how: Any) -> Any: ...


def local_dir(work_dir: Path) -> Path:
    """Where an export's site logs come home: beside its returned spool."""
    return work_dir / SiteLogs.DIR


def fetch(conn: Downloads, export_root: str, work_dir: Path) -> dict[str, Any]:
    """Bring the export's site logs home (replacing an earlier copy); what came, or
    {"error": why} when none did (never raised: the results matter more)."""
    target = local_dir(work_dir)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(mode=0o700)
    try:
        report = conn.download(
            f"{export_root.rstrip('/')}/{SiteLogs.DIR}", target, limits=LIMITS, max_files=MAX_FILES
        )
    except LumberjackError as exc:
        return {"error": f"site logs not fetched: {exc}"}
    return {
        "files": report.sent_files,  # into an empty directory: every file is sent
        "bytes": report.sent_bytes,
        "skipped": [{"name": repr(path), "reason": why} for path, why in report.bad_entries],
    }


def read(path: Path) -> str | None:
    """A fetched log file as printable text; None when it is missing, not a regular
    file of one name, or over the cap."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_size > SiteLogs.FILE_MAX:
            return None
        data = handle.read(SiteLogs.FILE_MAX + 1)
    if len(data) > SiteLogs.FILE_MAX:
        return None
    text = data.decode("utf-8", "replace")
    return printable(text, keep="\n\t")


def check_job(job: str, jobs: list[str], name: str) -> str:
    """`job` as an id of this export's ("12.3"), or BadInput."""
    if not _JOB_ID.fullmatch(job):
        raise BadInput(f"--job {job[:40]!r} is not a job id like 12.3")
    if job not in jobs:
        raise BadInput(f"job {job} is not in export {name!r} (its jobs: {_some(jobs)})")
    return job


def _some(jobs: list[str]) -> str:
    return ", ".join(jobs[:5]) + (f" and {len(jobs) - 5} more" if len(jobs) > 5 else "")


def job_log(logs: Path, job: str) -> str | None:
    """The site's excerpt for one job (checked by check_job first), or None."""
    return read(logs / SiteLogs.JOBS / f"{job}.log")


def summary(logs: Path, jobs: list[str]) -> dict[str, Any]:
    """What came home: each pilot's output (its text), and per job of this export that
    has a log the first line of it (its fate at the site)."""
    pilots: dict[str, str] = {}
    for entry in _files(logs / SiteLogs.PILOTS):
        text = read(logs / SiteLogs.PILOTS / entry)
        if text is not None:
            pilots[entry] = text
    known = set(jobs)
    fates: dict[str, str] = {}
    for entry in _files(logs / SiteLogs.JOBS):
        job = entry[: -len(".log")] if entry.endswith(".log") else ""
        if job in known:
            text = read(logs / SiteLogs.JOBS / entry)
            if text is not None:
                fates[job] = text.split("\n", 1)[0][:300]
    order = {job: index for index, job in enumerate(jobs)}
    return {"pilots": pilots, "jobs": dict(sorted(fates.items(), key=lambda i: order[i[0]]))}


def _files(directory: Path) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(directory) if e.is_file(follow_symlinks=False))
    except OSError:
        return []
