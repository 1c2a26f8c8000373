"""`status`: as condor_q is asked. No word: every export, from the ledger. NAME: that
export, asked of its site. A job id (CLUSTER or CLUSTER.PROC): which export holds it,
where, in what phase, and its state at the site as the last status saw it."""

from __future__ import annotations

import os
import time

import click

from lumberjack.cli import cli
from lumberjack.cli.common import emit, json_option, text_table
from lumberjack.cli.completion import complete_export
from lumberjack.core.answers import Status
from lumberjack.core.records import to_json
from lumberjack.errors import BadInput
from lumberjack.state import job_lookup, lifecycle, phases, steps
from lumberjack.state.ledger import ExportRecord, Ledger


@cli.command("status")
# Completion offers export names; a job id is typed.
@click.argument("name", required=False, metavar="[NAME | JOBID]", shell_complete=complete_export)
@json_option
def status_command(name: str | None, as_json: bool) -> None:
    """Where your exports and their jobs are, as condor_q is asked.

    \b
    status          every export: phase, site, jobs, and what the last status from
                    its site said (from the ledger; no site is asked)
    status NAME     that export, asked of its site now: jobs by status, pilots, pool;
                    the phase follows (running once a job has started, finished when
                    no job can run there again)
    status JOBID    which export holds job CLUSTER.PROC (or any job of CLUSTER): its
                    site, phase, and the job's state there as the last status saw it

    An export named like a job id (e.g. "12") is shown as that export.

    \b
    Examples:
      condor_lumberjack status
      condor_lumberjack status calib --json
      condor_lumberjack status 12.3
    """
    ledger = Ledger()
    if name is None:
        _overview(ledger, as_json)
    elif ledger.find(name) is None and job_lookup.is_job_id(name):
        _job(ledger, name, as_json)
    else:
        _export(ledger, name, as_json)


def _overview(ledger: Ledger, as_json: bool) -> None:
    records = ledger.list()
    rows = [["NAME", "PHASE", "SITE", "JOBS", "AT THE SITE (last status)"]]
    rows += [[r.name, r.phase.value, r.site or "-", str(len(r.jobs)), _last_text(r)]
             for r in records]  # fmt: skip
    text = text_table(rows) if records else f"no exports in {ledger.path}"
    data = [{"name": r.name, "phase": r.phase.value, "site": r.site, "owner": r.owner,
             "jobs": len(r.jobs), "last_status": job_lookup.last_status(r) or None}
            for r in records]  # fmt: skip
    emit(as_json, {"ok": True, "ledger": str(ledger.path), "exports": data}, text)


def _job(ledger: Ledger, job_id: str, as_json: bool) -> None:
    held = job_lookup.exports_holding(ledger, job_id)
    if not held:
        root = "" if os.geteuid() == 0 else (
            "; an export root made for you is in root's ledger (sudo condor_lumberjack "
            f"status {job_id})"
        )  # fmt: skip
        raise BadInput(
            f"no export holds job {job_id} in {ledger.path} (and no export is named so): "
            f"it was never exported from this account, or its export was cleaned up{root}"
        )
    lines = []
    for holding in held:
        r = holding.record
        state = holding.site_state()
        at_site = (f"{state} (last status)" if state else _last_text(r)) if r.site else "-"
        jobs = ", ".join(holding.jobs[:8]) + (" ..." if len(holding.jobs) > 8 else "")
        lines.append(
            f"job {jobs}: export {r.name} (phase {r.phase.value}, site {r.site or '-'}, "
            f"owner {r.owner or '-'})\n  at the site: {at_site}"
        )
    emit(as_json, {"ok": True, "job": job_id, "held_by": [h.to_json() for h in held]},
         "\n".join(lines))  # fmt: skip


def _last_text(record: ExportRecord) -> str:
    """What the last status from the site said, and when ("-" when none was read)."""
    last = job_lookup.last_status(record)
    if not last:
        return "-"
    counts = ", ".join(f"{n} {state}" for state, n in sorted(last["jobs"].items())) or "no jobs"
    return f"{counts} ({time.strftime('%H:%M UTC', time.gmtime(last['time']))})"


def _export(ledger: Ledger, name: str, as_json: bool) -> None:
    from lumberjack.transport.login import site_login

    record = ledger.get(name)
    if not phases.ends("status", record.phase):
        emit(as_json, {"ok": True, "name": name, "phase": record.phase},
             f"{name}: phase {record.phase} (nothing at a site)")  # fmt: skip
        return
    with steps.site_for(record) as site:
        answer = lifecycle.refresh_status(ledger, site, record)
        never = lifecycle.never_match(site, record, answer)
    login, login_text = site_login(site.profile)
    phase = ledger.get(name).phase
    jobs = ", ".join(f"{count} {state}" for state, count in sorted(answer.jobs.items()))
    pilots = ", ".join(f"{job} {state}" for job, state in answer.pilots.items()) or "none"
    pool = "running" if answer.pool_running else "stopped"
    if answer.placement == "allocation":  # the queue lives in SPOOL between pilots
        pool += " (in the allocation" + (
            f"; {answer.interrupted} interrupted jobs wait for the next pilot)"
            if answer.interrupted else ")"
        )  # fmt: skip
    lease = record.info.get("lease")
    if lease:  # its pilots and central manager are the lease's
        pilots += f" (lease {lease})"
    emit(as_json, {"ok": True, "name": name, "phase": phase, **to_json(answer),
                   "never_match": never, "login": login, "lease": lease},
         f"{name}: phase {phase}\n  jobs:   {jobs}\n  pilots: {pilots}\n"
         f"  pool:   {pool}\n" + _held_line(answer)
         + "".join(f"  never:  {line}\n" for line in never)
         + f"  login:  {record.site}: {login_text}")  # fmt: skip


def _held_line(answer: Status) -> str:
    """What the site's held jobs mean for the export's way home ("" when none is held)."""
    final, releasable = answer.held_final, answer.releasable
    if not final and not releasable:
        return ""
    parts = [f"{final} for good"] if final else []
    if releasable:
        until = time.strftime("%H:%M UTC", time.gmtime(answer.wait_until or 0))
        parts.append(f"{releasable} the site may release (waited for until {until})")
    return f"  held:   {', '.join(parts)}\n"
