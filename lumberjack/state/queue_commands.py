"""The local queue's commands reach the site at each `sync`, as HTCondor-C forwards
them, and condor_q at home shows where each exported job is (docs/condor-q.md).

- `forward`: condor_rm / condor_hold / condor_release / condor_qedit of an exported
  job at home become JobActions the site agent takes on the job's copy (`act`); an
  edit the site must not take holds the job at home with the reason.
- `show`: after each status answer, the attributes condor_q shows (LumberjackSite,
  LumberjackRemoteStatus, ... and JobStatus idle/running) set on the local jobs.
- `home_states` / `finish_at_home`: at import, jobs removed at home leave the queue
  removed (with the schedd's own aborted event) and jobs held at home stay held.

What was forwarded is kept in the export's work dir (home_queue.Forwarded), written
only once the site took it: a lost answer sends the same actions again, and the agent
takes each only where the job's status there still calls for it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, Callable

from lumberjack.ap import home_queue
from lumberjack.ap.schedd import old_syntax_texts
from lumberjack.core.answers import Acted, Status
from lumberjack.core.contract import QueueActions
from lumberjack.core.jobstatus import JobStatus, status_of
from lumberjack.errors import LumberjackError
from lumberjack.state.ledger import ExportRecord, Ledger

MEMORY = "queue-commands.json"
EXTERNAL = '"External"'
#: How many jobs one question to the schedd asks about: every attribute of a 100,000-job
#: export's jobs at once held over 2 GB at each sync (about 20 KB a job).
CHUNK = 5000


def local_jobs(
    schedd: Any, record: ExportRecord, projection: list[str] | None = None
) -> Iterator[dict[str, dict[str, str]]]:
    """The export's jobs still in the local queue, CHUNK jobs at a time, each as its
    attributes' texts (`projection`: those only; None: all)."""
    names = projection and ["ClusterId", "ProcId", "Managed", *projection]
    wanted = set(record.jobs)
    for constraint in job_ranges(record.jobs, CHUNK):
        found = {}
        for ad in schedd.query_ads(constraint, names or []):
            job = f"{ad.get('ClusterId')}.{ad.get('ProcId')}"
            if job in wanted:
                found[job] = old_syntax_texts(ad)
        yield found


def each_local_job(
    schedd: Any, record: ExportRecord, projection: list[str] | None = None
) -> Iterator[tuple[str, dict[str, str]]]:
    """local_jobs, job by job: (job, its attributes' texts)."""
    for found in local_jobs(schedd, record, projection):
        yield from found.items()


def job_ranges(jobs: list[str], size: int) -> Iterator[str]:
    """Constraints that select `jobs` ("C.P") `size` at a time, by each cluster's range
    of ProcIds (a range may hold jobs not exported: the caller keeps only its own)."""
    ordered = sorted((int(c), int(p)) for c, _, p in (job.partition(".") for job in jobs))
    for start in range(0, len(ordered), size):
        ranges: dict[int, list[int]] = {}
        for cluster, proc in ordered[start : start + size]:
            ranges.setdefault(cluster, [proc, proc])[1] = proc  # sorted: first and last
        yield " || ".join(
            f"(ClusterId == {c} && ProcId >= {low} && ProcId <= {high})"
            for c, (low, high) in ranges.items()
        )


def _load(ledger: Ledger, name: str) -> home_queue.Forwarded:
    path = ledger.work_dir(name) / MEMORY
    try:
        return home_queue.Forwarded.from_json(json.loads(path.read_text()), str(path))
    except FileNotFoundError:
        return home_queue.Forwarded()
    except (OSError, ValueError, LumberjackError):
        # Unreadable (a crash mid-write of an older release): the jobs as they are now
        # become the baseline; commands sent before are sent again, which the agent
        # takes only where the job's status there still calls for them.
        return home_queue.Forwarded()


def _save(ledger: Ledger, name: str, memory: home_queue.Forwarded) -> None:
    path = ledger.work_dir(name) / MEMORY
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(memory.to_json()))
    temporary.replace(path)


def remember_as_exported(ledger: Ledger, schedd: Any, record: ExportRecord) -> None:
    """The jobs' texts as export left them: the baseline of edits, so that a condor_qedit
    made while the export is exported, shipped or launched (before the first sync that
    asks the site) reaches the site too. Without it the baseline would be the jobs as
    that first sync found them, the edit already in."""
    memory = home_queue.Forwarded()
    for job, texts in each_local_job(schedd, record):
        if texts.get("Managed") == EXTERNAL:
            memory.remember(job, texts)
    _save(ledger, record.name, memory)


def forward(
    ledger: Ledger, schedd: Any, record: ExportRecord, send: Callable[[QueueActions], Acted]
) -> Acted | None:
    """This round's commands of the local queue, taken at the site by `send` (sync's:
    over the site's connection); None when there were none."""
    memory = _load(ledger, record.name)
    plan = home_queue.Plan()
    for found in local_jobs(schedd, record):
        jobs = {
            job: texts for job, texts in found.items() if texts.get("Managed") == EXTERNAL
        }  # a job at home again: not forwarded
        part = home_queue.plan_round(jobs, memory, record.site or "")
        plan.actions += part.actions
        plan.hold_at_home.update(part.hold_at_home)
    for job, reason in plan.hold_at_home.items():
        schedd.hold([job], reason)
    if not plan.actions:
        _save(ledger, record.name, memory)  # the baseline of edits, from the first round
        return None
    answer = send(QueueActions(tuple(plan.actions)))
    _save(ledger, record.name, memory)
    return answer


SHOWN = ["JobStatus", *home_queue.SHOWN_ATTRS]


def show(schedd: Any, record: ExportRecord, answer: Status) -> int:
    """Set what condor_q shows on the export's local jobs from a status answer; how
    many attribute edits that took (0 from an agent that reports no remote jobs)."""
    if not answer.remote_jobs:
        return 0
    remote = {job: entry.texts() for job, entry in answer.remote_jobs.items()}
    now, count = int(time.time()), 0
    for found in local_jobs(schedd, record, SHOWN):
        jobs = {job: texts for job, texts in found.items() if texts.get("Managed") == EXTERNAL}
        wanted = home_queue.shown_at_home(jobs, remote, record.site or "", record.name, now)
        edits = home_queue.changed(wanted, jobs)
        for (name, text), job_ids in edits.items():
            schedd.edit(job_ids, name, text)
        count += len(edits)
    return count


def idle_again(schedd: Any, record: ExportRecord) -> list[str]:
    """Before the jobs are handed back unrun (unexport --discard): those `show` made
    running at home idle again, or the local schedd would keep a running job with no
    shadow."""
    running = [
        job
        for job, texts in each_local_job(schedd, record, ["JobStatus"])
        if texts.get("Managed") == EXTERNAL
        and status_of(texts.get("JobStatus")) is JobStatus.RUNNING
    ]
    if running:
        schedd.edit(running, "JobStatus", str(int(JobStatus.IDLE)))
    return running


def home_states(schedd: Any, record: ExportRecord) -> tuple[list[str], list[str]]:
    """(removed, held) at home: jobs removed there and still in the queue, and jobs held
    there that are still the export's (import merges neither)."""
    removed, held = [], []
    for job, texts in each_local_job(schedd, record, ["JobStatus"]):
        status = status_of(texts.get("JobStatus"))
        if status is JobStatus.REMOVED:
            removed.append(job)
        elif status is JobStatus.HELD and texts.get("Managed") == EXTERNAL:
            held.append(job)
    return sorted(removed), sorted(held)


def finish_at_home(schedd: Any, removed: list[str], held: list[str]) -> None:
    """After the merge: the schedd lets go of the jobs held or removed at home (unexport
    of their clusters; every other job of them was merged), and the removed ones leave
    the queue as condor_rm leaves them, with the aborted event in the user log."""
    clusters = sorted({int(job.split(".")[0]) for job in (*removed, *held)})
    if not clusters:
        return
    try:
        schedd.unexport(clusters)
    except LumberjackError as exc:
        if "No clusters to unexport" not in str(exc):
            raise
    if removed:
        schedd.remove_x(removed)
