"""Which export holds a job (`status 12.3`, `status 12`), and what the last status from
its site said: looked up in the ledger alone, no schedd or site asked. Root's ledger
holds the exports of every owner it exported for, so root finds any of their jobs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from lumberjack.ap.export import JOB_ID
from lumberjack.core.answers import Status
from lumberjack.state.ledger import ExportRecord, Ledger


@dataclass(frozen=True)
class Holding:
    """An export holding (or that held) jobs the id names."""

    record: ExportRecord
    jobs: list[str]

    def site_state(self) -> str | None:
        """The jobs' state at the site in the last status, when it is known: the site
        reports counts per state, so only when every job of the export was in one."""
        counts = {state: n for state, n in last_status(self.record).get("jobs", {}).items() if n}
        return next(iter(counts)) if len(counts) == 1 else None

    def to_json(self) -> dict[str, Any]:
        record = self.record
        return {"export": record.name, "site": record.site, "phase": record.phase.value,
                "owner": record.owner, "jobs": self.jobs, "site_state": self.site_state(),
                "last_status": last_status(record) or None}  # fmt: skip


def is_job_id(word: str) -> bool:
    return JOB_ID.match(word) is not None


def exports_holding(ledger: Ledger, job_id: str) -> list[Holding]:
    """Every export holding jobs `job_id` (CLUSTER or CLUSTER.PROC) names, the newest
    first: a job unexported and exported again was held by more than one."""
    match = JOB_ID.match(job_id)
    if match is None:
        return []
    cluster, proc = (None if n is None else int(n) for n in match.groups())
    found = []
    for record in ledger.list():
        jobs = [j for j in record.jobs if _names(j, cluster, proc)]
        if jobs:
            found.append(Holding(record, jobs))
    return sorted(found, key=lambda h: h.record.created, reverse=True)


def _names(job: str, cluster: int | None, proc: int | None) -> bool:
    """Whether `job` ("12.3") is CLUSTER.PROC, or of CLUSTER when proc is None."""
    job_cluster, _, job_proc = job.partition(".")
    return int(job_cluster) == cluster and (proc is None or int(job_proc) == proc)


def record_status(ledger: Ledger, name: str, answer: Status) -> None:
    """Keep the counts of the status just read from the site (what `status` without a
    name and `status JOBID` show, without asking the site again)."""
    jobs = {state: n for state, n in answer.jobs.items() if n}
    ledger.update_info(name, last_status={"time": time.time(), "jobs": jobs})


def last_status(record: ExportRecord) -> dict[str, Any]:
    return record.info.get("last_status") or {}
