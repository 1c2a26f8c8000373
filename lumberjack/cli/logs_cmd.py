"""`condor_lumberjack logs`: what the site logged for an export, fetched with its results."""

from __future__ import annotations

import click

from lumberjack.ap import site_logs
from lumberjack.cli import cli
from lumberjack.cli.common import emit, json_option, plural
from lumberjack.cli.completion import complete_export
from lumberjack.state.ledger import Ledger


@cli.command("logs")
@click.argument("name", shell_complete=complete_export)
@click.option(
    "--job",
    "job",
    metavar="ID",
    help="Show only this job's logs from the site (12.3); default: every job's.",
)
@json_option
def logs_command(name: str, job: str | None, as_json: bool) -> None:
    """Show what the site logged for an export: the pilots' batch output, and each
    job's lines of the startd's StartLog; for a job held, failed or left unfinished
    there also its StarterLog section and the remote schedd's SchedLog and ShadowLog
    lines.

    The site gathers them when the export's pool stops; `fetch` brings them home with
    the results (bounded, checked, control characters removed). They stay until
    `cleanup`.

    \b
    Examples:
      condor_lumberjack logs calib                 # pilots' output, one line per job
      condor_lumberjack logs calib --job 12.3      # why 12.3 was held at the site
      condor_lumberjack logs calib --job 12.3 --json
    """
    ledger = Ledger()
    record = ledger.get(name)
    if job is not None:
        site_logs.check_job(job, record.jobs, name)
    logs = site_logs.local_dir(ledger.work_dir(name))
    fetched = logs.is_dir()
    data: dict = {"ok": True, "name": name, "fetched": fetched}
    if not fetched:
        text = f"no site logs of {name!r} yet: they come home with `condor_lumberjack fetch {name}`"
        if not record.site:
            text = f"{name!r} is an offline bundle: it has no site logs"
        emit(as_json, {**data, "pilots": {}, "jobs": {}}, text)
        return
    if job is not None:
        found = site_logs.job_log(logs, job)
        text = found if found is not None else f"the site sent no logs of job {job}"
        emit(as_json, {**data, "job": job, "log": found}, text.rstrip("\n"))
        return
    found_all = site_logs.summary(logs, record.jobs)
    lines = []
    for pilot, output in found_all["pilots"].items():
        lines += [f"== pilot output {pilot} ==", output.rstrip("\n")]
    lines.append(f"== jobs: {plural(len(found_all['jobs']), 'log')} "
                 f"(condor_lumberjack logs {name} --job ID) ==")  # fmt: skip
    lines += list(found_all["jobs"].values())
    emit(as_json, {**data, **found_all}, "\n".join(lines))
