"""Exports, the named batches of jobs that left the local schedd: `export` makes one,
`unexport` hands its jobs back, `exports` lists them (their journey's steps are in
steps_cmd.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lumberjack.ap import export as export_mod
from lumberjack.ap.bundle_home import bundle_path
from lumberjack.ap.names import check_name
from lumberjack.ap.schedd import LocalSchedd
from lumberjack.cli import cli
from lumberjack.cli.common import destination_options, emit, json_option, plural, selection_options
from lumberjack.cli.completion import complete_export
from lumberjack.cli.progress import for_command
from lumberjack.cli.request_options import (
    check_request,
    request_options,
    show_script_option,
    shown_scripts,
)
from lumberjack.errors import BadInput, LumberjackError
from lumberjack.state import phases
from lumberjack.state.exporting import run_export
from lumberjack.state.ledger import Ledger
from lumberjack.state.phases import Phase

if TYPE_CHECKING:
    from lumberjack.state.site_export import SiteExport


def skip_unmatched_option(func: Any) -> Any:
    """--skip-unmatched: export only the clusters that can run at the site."""
    return click.option(
        "--skip-unmatched",
        is_flag=True,
        help="Export only the clusters whose jobs match the pilots' slot; leave the others "
        "in the queue (and say which and why).",
    )(func)


def checked_selection(
    constraint: str | None,
    ids: tuple[str, ...],
    name: str | None,
    site: str | None,
    lease: str | None,
    request_flags: dict[str, Any],
) -> export_mod.Selection:
    """The jobs the options select (ids split at commas and spaces), with the export's
    name and request checked first: no schedd or site is asked about a typo."""
    all_ids = tuple(i for chunk in ids for i in chunk.replace(",", " ").split())
    selection = export_mod.Selection(constraint, all_ids)
    selection.check()
    if name is not None:
        check_name(name)
    if site is not None:
        check_request(site, lease, **request_flags)
    return selection


@cli.command("export")
@selection_options
@click.option("--name", help="Name of this export (default: SITE-DATE-TIME).")
@destination_options
@click.option(
    "--out",
    "-out",
    "out",
    type=click.Path(path_type=Path),
    help="Write an offline bundle to this new or empty directory.",
)
@click.option(
    "--remote-spool",
    "-remotespool",
    "remote_spool",
    metavar="PATH",
    help="SPOOL directory of the schedd that will run the jobs (offline bundles).",
)
@request_options
@skip_unmatched_option
@click.option("--dry-run", is_flag=True, help="Check and show what would happen; change nothing.")
@show_script_option
@json_option
def export_command(
    constraint: str | None,
    ids: tuple[str, ...],
    more_ids: tuple[str, ...],
    name: str | None,
    site: str | None,
    lease: str | None,
    out: Path | None,
    remote_spool: str | None,
    skip_unmatched: bool,
    dry_run: bool,
    show_script: bool,
    as_json: bool,
    **request_flags: object,
) -> None:
    """Take jobs out of the local schedd into a bundle for a site or another schedd.

    The jobs are marked as managed externally (the local schedd will not run them) until
    `import` brings their results back or `unexport` hands them back unrun. For a site,
    every job is first matched against the slot the pilots will advertise: clusters that
    could never run there are refused, one line each with the reason and the fix.

    \b
    Examples:
      condor_lumberjack export -c 'JobBatchName == "calib"' --site perlmutter --nodes 4 \\
          --allocation m1234
      condor_lumberjack export --ids 12 13 --site testbed --walltime 2h --dry-run
      condor_lumberjack export --ids 12 --site testbed --dry-run --show-script
      condor_lumberjack export --ids 12 13 --out /scratch/calib --remote-spool /hpc/spool
      condor_lumberjack export -c 'JobBatchName == "calib"' --lease calib
    """
    selection = checked_selection(constraint, ids + more_ids, name, site, lease, request_flags)
    if show_script and not (dry_run and site is not None and lease is None):
        raise BadInput(
            "--show-script goes with --site SITE --dry-run (an export joining a lease "
            "submits no pilots: see `lease create NAME --dry-run --show-script`)"
        )
    if lease is not None and out is not None:
        raise BadInput("--lease sends the jobs to the lease's site; it takes no --out")
    if out is not None and not remote_spool:
        raise BadInput("an offline bundle needs --remote-spool PATH (the other schedd's SPOOL)")
    ledger = Ledger()
    if lease is not None:
        from lumberjack.state import leases

        site = leases.site_to_join(ledger, lease, site, request_flags)
    if (out is None) == (site is None):
        raise BadInput("give either --site SITE, or --out DIR for an offline bundle")
    name = name or export_mod.default_name(site, taken=lambda n: ledger.find(n) is not None)
    if ledger.find(name):
        raise BadInput(f"an export named {name!r} already exists; choose another --name")
    schedd = LocalSchedd()
    if site is not None:
        from lumberjack.state import site_export  # the SSH libraries: only for a site

        bound = site_export.prepare(ledger, schedd, selection, site, name, request_flags,
                                    lease=lease, skip_unmatched=skip_unmatched)  # fmt: skip
        answer, text = site_export_answer(schedd, ledger, bound, dry_run, not as_json)
        if show_script:
            from lumberjack.profiles.sites import find_profile
            from lumberjack.state.plans import request_of

            request, root = request_of(bound.info), bound.info["remote_dir"]
            scripts, script_text = shown_scripts(request, find_profile(site), root)
            answer, text = {**answer, **scripts}, text + script_text
        emit(as_json, answer, text)
        return
    plan, _ = export_mod.plan_export(
        schedd, selection, name=name, bundle_dir=bundle_path(out), remote_spool=remote_spool
    )
    if dry_run:
        emit(as_json, {"ok": True, "dry_run": True, **plan.to_json()}, _plan_text(plan, dry=True))
        return
    with for_command(as_json).task("copying inputs", plan.input_bytes) as advance:
        written = run_export(schedd, ledger, plan, site=None, progress=advance)
    emit(as_json, {"ok": True, **plan.to_json(), **written}, _plan_text(plan, dry=False))


def site_export_answer(
    schedd: LocalSchedd,
    ledger: Ledger,
    bound: SiteExport,
    dry_run: bool,
    show_progress: bool,
) -> tuple[dict[str, Any], str]:
    """Write a checked site export (or only show it): the JSON answer and the text."""
    report = "\n" + "\n".join(bound.report)
    if dry_run:
        return bound.dry_run(), _plan_text(bound.plan, dry=True) + report
    with for_command(not show_progress).task("copying inputs", bound.plan.input_bytes) as advance:
        answer = bound.write(schedd, ledger, advance)
    next_step = f"\nnext: condor_lumberjack ship {bound.plan.name}"
    return answer, _plan_text(bound.plan, dry=False) + report + next_step


def _plan_text(plan: export_mod.Plan, dry: bool) -> str:
    verb = "would export" if dry else "exported"
    return (
        f"{verb} {plural(len(plan.jobs), 'job')} in {plural(len(plan.clusters), 'cluster')} "
        f"of {plan.owner} as {plan.name!r}\n"
        f"  bundle:       {plan.bundle_dir}\n"
        f"  remote spool: {plan.remote_spool}\n"
        f"  inputs:       {plural(plan.input_files, 'file')}, {plural(plan.input_bytes, 'byte')}"
    )


def _unexport_help() -> str:
    allowed = phases.either(phases.starts("unexport"))
    return f"""Hand an export's jobs back to the local schedd, unrun.

    Only for exports whose jobs are not at a site (phase {allowed}). Later (phase
    {phases.either(phases.starts("unexport --discard"))}), what the site did is dropped:
    give --discard; the remote pool is stopped first, and a site that cannot be reached
    is refused unless you add --force. `cleanup` then removes the site directory and
    the bundle.

    \b
    Example:
      condor_lumberjack unexport calib
    """


@cli.command("unexport", help=_unexport_help())
@click.argument("name", shell_complete=complete_export)
@click.option(
    "--discard",
    is_flag=True,
    help=f"From phase {phases.either(phases.starts('unexport --discard'))} (a fetch or "
    "import that failed or refused, or jobs you no longer want there): stop the remote "
    "pool if it may still run, hand the jobs back as they left and drop what the site "
    "did (finished jobs will run again).",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --discard: hand the jobs back even if the site cannot be reached to stop "
    "its pool (they may then run there and here).",
)
@click.option("--dry-run", is_flag=True, help="Show what would happen; change nothing.")
@json_option
def unexport_command(name: str, discard: bool, force: bool, dry_run: bool, as_json: bool) -> None:
    ledger = Ledger()
    record = ledger.get(name)
    if force and not discard:
        raise BadInput("--force goes with --discard (it only concerns a site's remote pool)")
    if discard:
        phases.check(record.phase, "unexport --discard", name)
    elif not phases.ends("unexport", record.phase):
        raise BadInput(unexport_refusal(name, record.phase))
    if dry_run:
        emit(
            as_json,
            {"ok": True, "dry_run": True, "clusters": record.clusters},
            f"would hand back clusters {', '.join(map(str, record.clusters))}",
        )
        return
    result: dict[str, Any] = {}
    with ledger.lock(name):
        if discard:
            result = _discard(ledger, name, force)
            count = result["jobs"]
        else:
            count = LocalSchedd().unexport(record.clusters)
            ledger.move(name, "unexport")
    text = f"handed {plural(count, 'job')} of {name!r} back to the local schedd"
    stop = result.get("stop")
    if stop:  # the agent's answer, or why there was nothing to stop
        text += "; its remote pool is stopped" if isinstance(stop, dict) else f"; {stop}"
    if result.get("left"):
        text += f"\nleft: {result['left']}"
    emit(as_json, {"ok": True, **result, "jobs": count, "clusters": record.clusters}, text)


def _discard(ledger: Ledger, name: str, force: bool) -> dict[str, Any]:
    """unexport --discard: over a connection to the site when its pool may still run."""
    from lumberjack.state import handback, steps

    record = ledger.get(name)
    if record.site and record.phase in handback.POOL_MAY_RUN:
        with steps.site_for(record) as site:
            return handback.discard_and_hand_back(ledger, LocalSchedd(), record, site, force=force)
    return handback.discard_and_hand_back(ledger, LocalSchedd(), record, force=force)


def unexport_refusal(name: str, phase: Phase) -> str:
    """Why an export cannot be unexported, and what to do instead (from the table)."""
    head = (
        f"export {name!r} is {phase}; unexport needs phase "
        f"{phases.either(phases.starts('unexport'))}"
    )
    home = phases.way_home(phase)
    if home == []:
        return f"{head}: its jobs are back in the local schedd already"
    if home is None:
        return f"{head}: there is nothing left to hand back"
    steps = " then ".join(f"`condor_lumberjack {step} {name}`" for step in home)
    idle = " (jobs that did not finish come back idle)" if "fetch" in home else ""
    refused = ""
    if phases.ends("unexport --discard", phase):
        refused = (
            f"; to drop what the site did (or what import refused), `condor_lumberjack "
            f"unexport --discard {name}` hands them back as they left"
        )
    return f"{head}: bring its jobs home with {steps}{idle}{refused}"


@cli.command("exports")
@json_option
def exports_command(as_json: bool) -> None:
    """List every export in the ledger with its phase.

    The ledger is in $LUMBERJACK_STATE_DIR (default ~/.local/state/condor-lumberjack).

    \b
    Example:
      condor_lumberjack exports --json
    """
    ledger = Ledger()
    records = ledger.list()
    lines = [f"{'NAME':24} {'PHASE':11} {'SITE':12} JOBS  BUNDLE"]
    for r in records:
        lease = f" (lease {r.info['lease']})" if r.info.get("lease") else ""
        lines.append(
            f"{r.name:24} {r.phase:11} {r.site or '-':12} {len(r.jobs):<5} {r.bundle_dir}{lease}"
        )
    if not records:
        lines = [f"no exports in {ledger.path} (another ledger: set $LUMBERJACK_STATE_DIR)"]
    logins = _logins(sorted({r.site for r in records if r.site}))
    lines += [f"login to {site}: {text}" for site, (_, text) in logins.items()]
    data = {"ok": True, "ledger": str(ledger.path), "exports": [r.to_json() for r in records],
            "logins": {site: login for site, (login, _) in logins.items()}}  # fmt: skip
    emit(as_json, data, "\n".join(lines))


def _logins(sites: list[str]) -> dict[str, tuple[dict[str, object], str]]:
    """Per site: whether a login is live and until when (no network: ssh -O check)."""
    from lumberjack.profiles.sites import find_profile
    from lumberjack.transport.login import site_login

    found = {}
    for site in sites:
        try:
            found[site] = site_login(find_profile(site))
        except LumberjackError as exc:  # a profile gone since the export
            found[site] = ({"error": str(exc)}, f"unknown ({exc})")
    return found
