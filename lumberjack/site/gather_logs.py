"""Site logs: the excerpts the agent gathers when it stops an export, fetched with the
results so that a person at home sees why a job failed or was held.

Into EXPORT/site-logs/ (made afresh each time, so `stop` stays repeatable):

    pilots/NAME      the tail of each pilot's batch output (pilots/out/ at the site)
    jobs/C.P.log     one file per job: a first line with the job's fate at the site,
                     then its lines of the startd's StartLog on each node it ran on;
                     for a job held, removed, failed or left unfinished also its
                     starter's StarterLog section, and its ShadowLog and SchedLog lines

Every file is bounded (the head and the tail of each excerpt are kept, the middle is
cut and says so), lines are cut and stripped of control characters, and the whole is
held to a budget: held and failed jobs come first, then the pilots' output. The access
point trusts none of it (ap/site_logs.py checks again). A joined export's pilots are
its lease's, shared with other exports: only its own schedd's logs are gathered.

Stdlib only: this module runs on the login node, inside the agent's zipapp.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from lumberjack.core import jobqueuelog as jql
from lumberjack.core.answers import LogsGathered
from lumberjack.core.classad_text import int_or_none, is_true, unquote_string
from lumberjack.core.contract import QUEUE_LOG, ExportLayout, LaunchPlan, SiteLogs
from lumberjack.core.jobstatus import JobStatus, status_of, word_of

LOGS_DIR, PILOTS, JOBS = SiteLogs.DIR, SiteLogs.PILOTS, SiteLogs.JOBS
FILE_MAX = SiteLogs.FILE_MAX
#: Largest excerpt of one log for one job (its head and tail kept).
EXCERPT_MAX = 15 << 10
#: StartLog lines of a job that completed: where and when it ran.
BRIEF_MAX = 4 << 10
TOTAL_MAX = SiteLogs.TOTAL_MAX
#: Of a site log larger than this, only the end is read.
READ_MAX = 256 << 20
LINE_MAX = 2000
PILOT_FILES_MAX = 200

_JOB_TOKEN = re.compile(r"(?<![\w.])(\d+\.\d+)(?![\w]|\.\d)")
_SLOT_LINE = re.compile(r"^\S+ \S+ (slot\d+(?:_\d+)*)(?:\[(\d+\.\d+)\])?: (.*)$")
_REMOTE_JOB = re.compile(r"Remote job ID is (\d+\.\d+)")
_STARTER_OF = re.compile(r"Starter (\d+)$")
_STARTER_EXITED = re.compile(r"Starter pid (\d+) exited")
_STARTER_UP = re.compile(r"\(pid:(\d+)\) \*\* condor_starter \(CONDOR_STARTER\) STARTING UP")
_STARTER_JOB = re.compile(r"(?:with ID: |Job )(\d+\.\d+)")
_BANNER = re.compile(r"\*{20,}$")


def clean(line: str) -> str:
    """One printable line (tabs kept), at most LINE_MAX characters."""
    text = "".join(c if c.isprintable() or c == "\t" else "?" for c in line[:LINE_MAX])
    return text + (" [line cut]" if len(line) > LINE_MAX else "")


class Excerpt:
    """The lines of one log for one job, at most `limit` bytes: the head and the tail
    are kept, the middle is counted."""

    def __init__(self, limit: int) -> None:
        self.head: list[str] = []
        self.tail: deque[str] = deque()
        self.head_left, self.tail_max = limit // 4, limit - limit // 4
        self.tail_size = self.cut = 0

    def add(self, line: str) -> None:
        size = len(line) + 1
        if size <= self.head_left and not self.tail:
            self.head.append(line)
            self.head_left -= size
            return
        self.tail.append(line)
        self.tail_size += size
        while self.tail_size > self.tail_max:
            self.tail_size -= len(self.tail.popleft()) + 1
            self.cut += 1

    def text(self) -> str:
        middle = [f"[... {self.cut} lines cut ...]"] if self.cut else []
        return "".join(f"{line}\n" for line in [*self.head, *middle, *self.tail])

    def __bool__(self) -> bool:
        return bool(self.head or self.tail)


def read_lines(path: Path) -> Iterator[str]:
    """The lines of a log of this account (its end only when huge), cleaned; nothing for
    a link, a special file or a file that is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return
        if info.st_size > READ_MAX:
            handle.seek(info.st_size - READ_MAX)
            handle.readline()  # a partial line
        for raw in handle:
            yield clean(raw.decode("utf-8", "replace").rstrip("\r\n"))


def _rotated(path: Path) -> list[Path]:
    """A daemon log and the one HTCondor rotated out before it (X.old), oldest first."""
    return [path.with_name(path.name + ".old"), path]


# ---- what each job became at the site -------------------------------------------------


def outcomes(spool: Path) -> dict[str, tuple[str, bool]]:
    """Per job: (the first line of its file, whether it went wrong), from the site's
    queue as the schedd left it."""
    found: dict[str, tuple[str, bool]] = {}
    queue = spool / QUEUE_LOG
    if not queue.is_file():
        return found  # stopped before any queue was placed
    for key, ad in jql.read_log(queue).items():
        if jql.key_kind(key) != "proc":
            continue
        status = status_of(ad.get("JobStatus") or "1")
        code = int_or_none(ad.get("ExitCode"))
        signal = is_true(ad.get("ExitBySignal"))
        started = (int_or_none(ad.get("NumJobStarts")) or 0) > 0
        line = f"job {key}: {word_of(ad.get('JobStatus') or '1')} at the site"
        if status is JobStatus.HELD:
            reason = unquote_string(ad.get("HoldReason") or "") or "no reason"
            line += f" (HoldReasonCode {ad.get('HoldReasonCode')}): {reason}"
        elif signal:
            line += f", killed by signal {ad.get('ExitSignal')}"
        elif code is not None and status is JobStatus.COMPLETED:
            line += f", exit code {code}"
        wrong = status in (JobStatus.HELD, JobStatus.REMOVED) or signal or bool(code)
        if status not in (JobStatus.COMPLETED, JobStatus.REMOVED, JobStatus.HELD):
            wrong = wrong or started  # cut off (its pilot ended) or left running
        found[key] = (clean(line), wrong)
    return found


# ---- the startds' logs: StartLog and StarterLog ------------------------------------------


def startd_lines(log: Path, wanted: dict[str, int], into: dict[str, Excerpt]) -> dict[str, str]:
    """A node's StartLog lines of each wanted job's slot (from the activation that ran
    it to the next), into `into` (excerpts of `wanted[job]` bytes); starter PID -> job."""
    current: dict[str, str] = {}
    pending: dict[str, str] = {}
    starters: dict[str, str] = {}

    def add(job: str | None, line: str) -> None:
        if job in wanted:
            into.setdefault(job, Excerpt(wanted[job])).add(line)

    for path in _rotated(log):
        for line in read_lines(path):
            match = _SLOT_LINE.match(line)
            if match is None:
                exited = _STARTER_EXITED.search(line)
                if exited:
                    add(starters.get(exited.group(1)), line)
                continue
            slot, tagged, rest = match.groups()
            if rest.startswith("Got activate_claim request"):
                current.pop(slot, None)
                pending[slot] = line
                continue
            remote = _REMOTE_JOB.match(rest)
            if remote:
                current[slot] = remote.group(1)
                if slot in pending:
                    add(current[slot], pending.pop(slot))
            job = tagged or current.get(slot)
            starter = _STARTER_OF.search(rest)
            if starter and job:
                starters[starter.group(1)] = job
            add(job, line)
    return starters


def starter_sections(
    log: Path, starters: dict[str, str], wanted: set[str], into: dict[str, Excerpt]
) -> None:
    """Each wanted job's section of a StarterLog: from its starter's banner to the next."""
    section: Excerpt | None = None
    job: str | None = None
    banner: str | None = None

    def finish() -> None:
        if section and job in wanted and job not in into:
            into[job] = section

    for path in _rotated(log):
        for line in read_lines(path):
            if _BANNER.search(line) and banner is None:
                banner = line
                continue
            up = _STARTER_UP.search(line)
            if up:
                finish()
                section, job = Excerpt(EXCERPT_MAX), starters.get(up.group(1))
            if section is not None:
                if banner is not None:
                    section.add(banner)
                section.add(line)
                if job is None:
                    named = _STARTER_JOB.search(line)
                    job = named.group(1) if named else None
            banner = None
    finish()


# ---- the pool's logs: ShadowLog and SchedLog ---------------------------------------------


def mentions(log: Path, wanted: set[str], into: dict[str, Excerpt]) -> None:
    """The lines of a log that name a wanted job ("438.2", "(438.2)")."""
    for path in _rotated(log):
        for line in read_lines(path):
            for job in set(_JOB_TOKEN.findall(line)) & wanted:
                into.setdefault(job, Excerpt(EXCERPT_MAX)).add(line)


# ---- gathering ---------------------------------------------------------------------------


def gather(root: str, plan: LaunchPlan | None) -> LogsGathered:
    """Write EXPORT/site-logs/ afresh from the export's logs; what was written."""
    layout = ExportLayout(root)
    out = Path(layout.site_logs)
    shutil.rmtree(out, ignore_errors=True)
    (out / PILOTS).mkdir(parents=True, mode=0o700)
    (out / JOBS).mkdir(mode=0o700)
    joined = bool(plan and plan.lease)
    fates = outcomes(Path(layout.spool))
    wrong = {job for job, (_, bad) in fates.items() if bad}
    found = _excerpts(layout, fates, wrong, joined)
    budget = [TOTAL_MAX]
    written = left_out = pilots = 0
    first = sorted(wrong, key=_job_order)
    for batch in ("wrong", "pilots", "rest"):
        if batch == "pilots":
            if not joined:
                pilots = _pilot_tails(Path(layout.pilot_output), out / PILOTS, budget)
            continue
        jobs = first if batch == "wrong" else sorted(set(fates) - wrong, key=_job_order)
        for job in jobs:
            parts = [fates[job][0] + "\n"]
            parts += [f"== {title} ==\n{logs[job].text()}" for title, logs in found if job in logs]
            text = "".join(parts).encode("utf-8")[:FILE_MAX]
            if len(text) > budget[0]:
                left_out += 1
                continue
            _write(out / JOBS / f"{job}.log", text)
            budget[0] -= len(text)
            written += 1
    return LogsGathered(dir=str(out), pilot_files=pilots, jobs=written, left_out=left_out,
                        bytes=TOTAL_MAX - budget[0])  # fmt: skip


def gather_safely(root: str, plan: LaunchPlan | None) -> LogsGathered:
    """`gather` for the agent's `stop`, once the logs are final: a failure says why and
    never fails the stop."""
    try:
        return gather(root, plan)
    except (OSError, ValueError, jql.JobQueueLogError) as exc:
        return LogsGathered(error=f"site logs not gathered: {exc}")


def _excerpts(
    layout: ExportLayout, fates: dict[str, tuple[str, bool]], wrong: set[str], joined: bool
) -> list[tuple[str, dict[str, Excerpt]]]:
    """(log name, job -> its excerpt) of every log read: the startds' unless `joined`,
    the pool's own for the jobs that went wrong."""
    startd: dict[str, Excerpt] = {}
    starter: dict[str, Excerpt] = {}
    if not joined:
        sizes = {job: EXCERPT_MAX if job in wrong else BRIEF_MAX for job in fates}
        for node in sorted(Path(layout.pilots, "nodes").glob("*/log")):
            starters = startd_lines(node / "StartLog", sizes, startd)
            for log in sorted(node.glob("StarterLog.slot*")):
                if not log.name.endswith(".old"):
                    starter_sections(log, starters, wrong, starter)
    pool_log = Path(layout.pool_local, "log")
    shadow: dict[str, Excerpt] = {}
    schedd: dict[str, Excerpt] = {}
    mentions(pool_log / "ShadowLog", wrong, shadow)
    mentions(pool_log / "SchedLog", wrong, schedd)
    return [("StartLog", startd), ("StarterLog", starter), ("ShadowLog", shadow),
            ("SchedLog", schedd)]  # fmt: skip


def _pilot_tails(source: Path, target: Path, budget: list[int]) -> int:
    """The end of each pilot's batch output (newest first, within the budget)."""
    try:
        entries = [e for e in os.scandir(source) if e.is_file(follow_symlinks=False)]
    except OSError:
        return 0
    entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime, reverse=True)
    count = 0
    for entry in entries[:PILOT_FILES_MAX]:
        excerpt = Excerpt(FILE_MAX - 64)
        for line in read_lines(Path(entry.path)):
            excerpt.add(line)
        data = excerpt.text().encode("utf-8")[:FILE_MAX]
        name = clean(entry.name).replace("/", "?")
        if len(data) > budget[0] or name.startswith("."):
            continue
        _write(target / name, data)
        budget[0] -= len(data)
        count += 1
    return count


def _job_order(job: str) -> tuple[int, int]:
    cluster, proc = job.split(".")
    return int(cluster), int(proc)


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
