"""The steps of an export's journey, one verb each: `ship`, `launch`, `fetch`, `cleanup`,
and `sync` and `run`, which take every step due (state/steps.py; `status` is in
status_cmd.py, `import` in import_cmd.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable

import click

from lumberjack.cli import cli, synclog
from lumberjack.cli.common import (
    destination_options,
    emit,
    json_option,
    plural,
    selection_options,
    text_of,
)
from lumberjack.cli.completion import complete_export
from lumberjack.cli.progress import for_command
from lumberjack.cli.request_options import Duration, request_options
from lumberjack.core.message_text import shortened
from lumberjack.core.units import format_walltime
from lumberjack.errors import Busy, LoginNeeded, LumberjackError
from lumberjack.state import lifecycle, phases, steps, sync
from lumberjack.state.ledger import ExportRecord, Ledger
from lumberjack.state.phases import Phase

name_argument = click.argument("name", shell_complete=complete_export)
dry_run_option = click.option(
    "--dry-run", is_flag=True, help="Show what would be done; change nothing."
)


def _one_step(
    name: str,
    as_json: bool,
    dry_run: bool,
    step: Callable[[Ledger, steps.Site, ExportRecord], dict[str, Any]],
    describe: str,
    shared_account: bool = False,
) -> None:
    """The shape every single-step command shares: checks, lock, one connection.
    `shared_account` (--shared-account) is remembered for this and every later step."""
    ledger = Ledger()
    if shared_account and not dry_run:
        ledger.update_info(name, shared_account=True)
    record = ledger.get(name)
    steps.check_phase(record, describe)
    if dry_run:
        emit(as_json, {"ok": True, "dry_run": True, "name": name, "phase": record.phase},
             f"would {describe} {name!r} (phase {record.phase}, site {record.site})")  # fmt: skip
        return
    with ledger.lock(name), steps.site_for(record, progress=for_command(as_json)) as site:
        result = step(ledger, site, record)
    phase = ledger.get(name).phase
    emit(as_json, {"ok": True, "name": name, "phase": phase, **result},
         f"{describe}: {name!r} is now {phase}\n{_summary(result)}")  # fmt: skip


def _summary(result: dict[str, Any]) -> str:
    """A step's answer as text: one line per key, its value in words (never a repr)."""
    lines = {"skipped": skipped_line, "over_cap": over_cap_line}
    return "\n".join(
        f"  {lines[key](value)}" if key in lines else f"  {key.replace('_', ' ')}: {text_of(value)}"
        for key, value in result.items()
        if key not in lines or value
    )


def over_cap_line(over: dict[str, str]) -> str:
    """Fetch's jobs left at the site over a per-job cap: import holds them."""
    named = "; ".join(f"{job} {why}" for job, why in sorted(over.items()))
    return f"left at the site, held at import: {named}"


def skipped_line(skipped: list[dict[str, str]], shown: int = 4) -> str:
    """One line for what a fetch did not take from the site (--json has them all)."""
    named = ", ".join(f"{shortened(item['name'])} ({item['reason']})" for item in skipped[:shown])
    more = f" and {len(skipped) - shown} more (see --json)" if len(skipped) > shown else ""
    count = plural(len(skipped), "entry", "entries")
    return f"skipped: {count} the site returned, never written here: {named}{more}"


_SHARED_ACCOUNT_HELP = (
    "Go ahead beside another owner's export on a site whose jobs get no container "
    "(runtime none, podman-hpc): the site account's users may see each other's files."
)


@cli.command("ship")
@name_argument
@click.option("--shared-account", is_flag=True, help=_SHARED_ACCOUNT_HELP)
@dry_run_option
@json_option
def ship_command(name: str, shared_account: bool, dry_run: bool, as_json: bool) -> None:
    """Send an export's bundle and the site agent to its site over SSH.

    Resumable: run it again after an interruption and only missing or changed files
    move; every file is checked against the manifest's sha256 at the site.

    \b
    Example:
      condor_lumberjack ship calib
    """
    _one_step(name, as_json, dry_run, lifecycle.ship, "ship", shared_account)


@cli.command("launch")
@name_argument
@click.option("--shared-account", is_flag=True, help=_SHARED_ACCOUNT_HELP)
@dry_run_option
@json_option
def launch_command(name: str, shared_account: bool, dry_run: bool, as_json: bool) -> None:
    """Start the remote pool on the shipped queue and submit the pilots.

    Safe to repeat: the queue is never put in place twice, and pilots are submitted
    only when idle jobs are left and none of this export's pilots is queued or running.

    \b
    Example:
      condor_lumberjack launch calib
    """
    _one_step(name, as_json, dry_run, lifecycle.launch, "launch", shared_account)


@cli.command("fetch")
@name_argument
@dry_run_option
@json_option
def fetch_command(name: str, dry_run: bool, as_json: bool) -> None:
    """Stop the remote schedd and bring its spool and the outputs back, verified.

    Jobs that had not finished return too; `import` gives them back to the local schedd
    as idle.

    \b
    Example:
      condor_lumberjack fetch calib && condor_lumberjack import calib
    """
    _one_step(name, as_json, dry_run, lifecycle.fetch, "fetch")


CLEANUP_HELP = f"""Remove a finished export's directory at the site and its local bundle.

    Only for exports in phase {phases.either(phases.starts("cleanup"))}: its jobs are
    the local schedd's again (an export still at a site: `unexport --discard` first).
    With --site, from phase {phases.either(phases.starts("cleanup --site"))} (an import
    that refused): only the site directory goes, with the pool's keys; the bundle stays.
    With --force, a site that cannot be reached does not keep the local bundle: the
    directory left there is named, and the next cleanup tries it again.

    \b
    Example:
      condor_lumberjack cleanup calib
    """


@cli.command("cleanup", help=CLEANUP_HELP)
@name_argument
@click.option("--site", "site_only", is_flag=True, help="Only the site directory.")
@click.option(
    "--force", is_flag=True, help="Remove the local bundle even if the site cannot be reached."
)
@dry_run_option
@json_option
def cleanup_command(name: str, site_only: bool, force: bool, dry_run: bool, as_json: bool) -> None:
    from lumberjack.state import handback

    def step(ledger: Ledger, site: steps.Site | None, record: ExportRecord) -> dict:
        return handback.cleanup(ledger, site, record, site_only=site_only, force=force)

    ledger = Ledger()
    record = ledger.get(name)
    if not record.site and not site_only:
        steps.check_phase(record, "cleanup")
        if dry_run:
            emit(as_json, {"ok": True, "dry_run": True}, f"would remove {record.bundle_dir}")
            return
        with ledger.lock(name):
            result = step(ledger, None, record)
        emit(as_json, {"ok": True, "name": name, **result}, f"cleaned {name!r}")
        return
    _one_step(name, as_json, dry_run, step, "cleanup --site" if site_only else "cleanup")


@cli.command("sync")
@click.option(
    "--name", "names", multiple=True, shell_complete=complete_export,
    help="Only these exports (default: all).",
)  # fmt: skip
@click.option(
    "--watch",
    is_flag=True,
    help="Keep advancing until no export has a step left, over one connection per site "
    "held all along (asks once at an MFA site that allows no connection sharing).",
)
@click.option(
    "--poll", type=Duration(), default="30s", metavar="DURATION",
    help='Time between rounds of --watch ("30s", "2m"; a bare number is seconds).',
)  # fmt: skip
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False, writable=True),
    help="Also append each round, one JSON line with its time, to this file; it is "
    f"rotated at {synclog.MAX_BYTES // 2**20} MiB, keeping {synclog.BACKUPS} old files "
    "(default: no log file).",
)
@dry_run_option
@json_option
def sync_command(
    names: tuple[str, ...],
    watch: bool,
    poll: int,
    log_file: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Advance every export one safe step or more; for cron, safe to run every minute.

    One connection per site serves all its exports. An export another lumberjack
    process is working on is skipped, not waited for. An export left half-exported by a
    crash is handed back to the local schedd. At an MFA site it rides the login
    (`condor_lumberjack login SITE`) and never asks; with none it fails at once (exit 5).
    With --watch, one line (or JSON object) per round. Leases (without --name): jobs
    that opted in with +LumberjackLease = "NAME" are exported into lease NAME once
    idle, a half-created or half-stopped lease is finished, and a lease whose pilots
    are gone ends once no export in it is waiting.

    Exit codes: 0 nothing failed (whether or not anything moved: the JSON "summary"
    says which); 1 a failure that needs a person (e.g. pilots gave up, a cap refused a
    fetch); 2 bad input; 3 a site failed (retried next round); 5 a site needs a login;
    7 a setup mistake (host key, login key, profile, allocation, site image: retrying
    cannot help). Several kinds in one round give 1.

    \b
    Example crontab line (docs/mfa-and-cron.md has a systemd timer too):
      * * * * * condor_lumberjack sync --log-file ~/lumberjack-sync.log >/dev/null
    Where a site allows no connection sharing, in a terminal multiplexer instead:
      condor_lumberjack sync --watch
    """
    ledger = Ledger()
    for name in names:
        ledger.get(name)  # an unknown name is a typo (exit 2), not "nothing to do"
    if not watch:
        results = sync.sync(ledger, names=names, dry_run=dry_run)
        _sync_round(ledger, results, dry_run, as_json, log_file=log_file)
        return
    sites: dict[str, steps.Site] = {}
    try:
        while True:
            results = sync.sync(
                ledger, names=names, dry_run=dry_run, sites=sites,
                open_site=lambda record: steps.site_for(record, hold=True),
            )  # fmt: skip
            code = _sync_round(
                ledger, results, dry_run, as_json, exit_on_error=False, log_file=log_file
            )
            if code == LoginNeeded.exit_code or dry_run or not _pending(ledger, names):
                break
            time.sleep(poll)
    finally:
        for site in sites.values():
            site.close()
    if code:
        sys.exit(code)


def _pending(ledger: Ledger, names: tuple[str, ...]) -> bool:
    """Whether sync has a step left for any export (of those named)."""
    return any(
        phases.sync_step(record.phase) is not None
        for record in ledger.list()
        if not names or record.name in names
    )


def _sync_round(
    ledger: Ledger,
    results: list[dict[str, Any]],
    dry_run: bool,
    as_json: bool,
    exit_on_error: bool = True,
    log_file: str | None = None,
) -> int:
    """Print one round of sync (and log it); its exit code (the errors' own when they
    share one)."""
    failed = [r for r in results if r.get("error")]
    lines = [
        f"{r['name']:24} {r['phase']:10} "
        + (f"error: {r['error']}" if r.get("error") else " ".join(r.get("steps", [])) or "-")
        for r in results
    ]
    codes = {r.get("exit_code", LumberjackError.exit_code) for r in failed}
    code = (codes.pop() if len(codes) == 1 else LumberjackError.exit_code) if failed else 0
    rolled_back = [r.name for r in ledger.list() if r.phase == Phase.FAILED]
    answer = {"ok": not failed, "dry_run": dry_run, "exports": results,
              "summary": synclog.summary(results, rolled_back, code)}  # fmt: skip
    if log_file:
        synclog.append(Path(log_file), answer)
    emit(as_json, answer, "\n".join(lines) or "no exports to advance")
    if code and exit_on_error:
        sys.exit(code)
    return code


@cli.command("run")
@selection_options
@destination_options
@click.option("--name", help="Name of this export (default: SITE-DATE-TIME).")
@request_options
@click.option("--wait/--no-wait", default=True, help="Block until imported.")
@click.option(
    "--poll",
    type=Duration(),
    default="30s",
    metavar="DURATION",
    help='Time between status checks ("30s", "2m"; a bare number is seconds).',
)
@click.option(
    "--timeout", type=Duration(), default="0", metavar="DURATION",
    help='Give up waiting after this long ("4h", "90m"; 0: never).',
)  # fmt: skip
@dry_run_option
@json_option
def run_command(
    constraint: str | None,
    ids: tuple[str, ...],
    more_ids: tuple[str, ...],
    site: str | None,
    lease: str | None,
    name: str | None,
    wait: bool,
    poll: int,
    timeout: int,
    dry_run: bool,
    as_json: bool,
    **request_flags: Any,
) -> None:
    """Export, ship, launch, wait, fetch and import: the whole journey, for scripts and
    DAGMan nodes. Exit code 0 only when every job came back completed. With --json, one
    JSON object at the end (the export's own under "export"). One connection to the
    site serves every step (at an MFA site without a login: asked for once).

    \b
    Examples:
      condor_lumberjack run --ids 12 --site testbed --nodes 3 --wait
      condor_lumberjack run -c 'JobBatchName == "calib"' --site perlmutter --walltime 4h \\
          --allocation m1234
      condor_lumberjack run -c 'JobBatchName == "calib"' --lease calib --wait
    """
    from lumberjack.ap import export as export_mod
    from lumberjack.ap.schedd import LocalSchedd
    from lumberjack.cli.exports_cmd import checked_selection, site_export_answer
    from lumberjack.errors import BadInput
    from lumberjack.profiles.sites import find_profile
    from lumberjack.state import leases, site_export

    selection = checked_selection(constraint, ids + more_ids, name, site, lease, request_flags)
    ledger = Ledger()
    if lease is not None:
        site = leases.site_to_join(ledger, lease, site, request_flags)
    if site is None:
        raise BadInput("give --site SITE (or --lease NAME)")
    name = name or export_mod.default_name(site, taken=lambda n: ledger.find(n) is not None)
    schedd = LocalSchedd()
    held = steps.Site(find_profile(site))  # the one connection of every step
    with held:
        bound = site_export.prepare(ledger, schedd, selection, site, name, request_flags, held,
                                    lease=lease)  # fmt: skip
        exported, text = site_export_answer(schedd, ledger, bound, dry_run, not as_json)
        if dry_run:
            emit(as_json, exported, text)
            return
        if not as_json:
            click.echo(text)
        _wait(ledger, schedd, name, held, wait, poll, timeout)
    record = ledger.get(name)
    imported = record.info.get("imported") or {}
    complete = record.phase == Phase.IMPORTED and imported.get("completed") == len(record.jobs)
    emit(as_json, {"ok": complete or not wait, "name": name, "phase": record.phase,
                   "imported": imported, "export": exported},
         f"{name}: {record.phase}; {imported.get('completed', 0)} of "
         f"{plural(len(record.jobs), 'job')} completed")  # fmt: skip
    if wait and not complete:
        sys.exit(LumberjackError.exit_code)


def _wait(
    ledger: Ledger,
    schedd: Any,
    name: str,
    site: steps.Site,
    wait: bool,
    poll: int,
    timeout: int,
) -> None:
    """Sync one export over `site` until imported (once without `wait`)."""
    deadline = time.monotonic() + timeout if timeout > 0 else None
    sites = {site.profile.name: site}
    while True:
        results = sync.sync(ledger, names=(name,), schedd=schedd, sites=sites)
        record = ledger.get(name)
        if results and results[0].get("error"):
            error = LumberjackError(f"{name}: {results[0]['error']}")
            error.exit_code = results[0].get("exit_code", error.exit_code)
            raise error
        if record.phase == Phase.IMPORTED or not wait:
            return
        if deadline is not None and time.monotonic() > deadline:
            raise Busy(
                f"{name} is still {record.phase} after {format_walltime(timeout)}; `sync` goes on"
            )
        time.sleep(poll)
