"""`export`, `import` and `unexport`: jobs out of the local schedd and back."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from lumberjack.ap import export as export_mod
from lumberjack.ap import importer
from lumberjack.ap.schedd import LocalSchedd
from lumberjack.cli import cli
from lumberjack.cli.common import emit, json_option
from lumberjack.cli.progress import for_command
from lumberjack.cli.request_options import request_from_options, request_options
from lumberjack.errors import BadInput
from lumberjack.state.ledger import Ledger


@cli.command("export")
@click.option(
    "-c",
    "--constraint",
    "-jobconstraint",
    "constraint",
    metavar="EXPR",
    help="ClassAd constraint selecting the jobs (whole clusters).",
)
@click.option(
    "--ids",
    "-ids",
    "ids",
    multiple=True,
    metavar="ID",
    help="Job ids: CLUSTER or CLUSTER.PROC; repeat or give several.",
)
@click.argument("more_ids", nargs=-1, metavar="[ID...]")
@click.option("--name", help="Name of this export (default: SITE-DATE-TIME).")
@click.option("--site", help="Site profile the jobs go to (see `sites list`).")
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
@click.option("--dry-run", is_flag=True, help="Check and show what would happen; change nothing.")
@json_option
def export_command(
    constraint: str | None,
    ids: tuple[str, ...],
    more_ids: tuple[str, ...],
    name: str | None,
    site: str | None,
    out: Path | None,
    remote_spool: str | None,
    dry_run: bool,
    as_json: bool,
    **request_flags: object,
) -> None:
    """Take jobs out of the local schedd into a bundle for a site or another schedd.

    The jobs are marked as managed externally (the local schedd will not run them) until
    `import` brings their results back or `unexport` hands them back unrun.

    \b
    Examples:
      condor_lumberjack export -c 'JobBatchName == "calib"' --site perlmutter --nodes 4
      condor_lumberjack export --ids 12 13 --site testbed --walltime 2h --dry-run
      condor_lumberjack export --ids 12 13 --out /scratch/calib --remote-spool /hpc/spool
    """
    all_ids = tuple(i for chunk in ids + more_ids for i in chunk.replace(",", " ").split())
    selection = export_mod.Selection(constraint, all_ids)
    if (out is None) == (site is None):
        raise BadInput("give either --site SITE, or --out DIR for an offline bundle")
    ledger = Ledger()
    name = name or export_mod.default_name(site, taken=lambda n: ledger.find(n) is not None)
    if ledger.find(name):
        raise BadInput(f"an export named {name!r} already exists; choose another --name")
    schedd = LocalSchedd()
    if site is not None:
        export_to_site(ledger, schedd, selection, site, name, dry_run, as_json, request_flags)
        return
    if not remote_spool:
        raise BadInput("an offline bundle needs --remote-spool PATH (the other schedd's SPOOL)")
    plan, jobs, _ = export_mod.plan_export(
        schedd, selection, name=name, bundle_dir=out.resolve(), remote_spool=remote_spool
    )
    if dry_run:
        emit(as_json, {"ok": True, "dry_run": True, **plan.to_json()}, _plan_text(plan, dry=True))
        return
    _run_export(schedd, ledger, plan, jobs, None, as_json, {})


def export_to_site(
    ledger: Ledger,
    schedd: LocalSchedd,
    selection: export_mod.Selection,
    site: str,
    name: str,
    dry_run: bool,
    as_json: bool,
    request_flags: dict[str, object],
) -> dict:
    """Export for a site: request checked against the profile before any login, then
    one SSH connection resolves where the export will live there."""
    from lumberjack.profiles.request import report_dict, report_lines
    from lumberjack.profiles.sites import find_profile
    from lumberjack.state import lifecycle

    profile = find_profile(site)
    jobs = export_mod.select_jobs(schedd, selection)  # checks the jobs, too
    request = request_from_options(
        profile, job_runtimes_s=export_mod.runtimes_s(jobs), **request_flags
    )
    report = report_lines(request, profile)
    with lifecycle.Site(profile) as connection:
        remote_dir = connection.export_dir(name)
        # An older export's directory (its queue already placed) would be reused as is.
        if connection.conn.run(f"test -e {shlex.quote(remote_dir)}", check=False).ok:
            raise BadInput(
                f"{remote_dir} already exists at site {site}: an earlier export of that name; "
                "choose another --name (or remove that directory)"
            )
    bundle_dir = ledger.bundles_dir() / name
    plan, jobs, _ = export_mod.plan_export(
        schedd, selection, name=name, bundle_dir=bundle_dir,
        remote_spool=f"{remote_dir}/spool",
    )  # fmt: skip
    info = {"remote_dir": remote_dir, "request": lifecycle.request_info(request)}
    extra = {"site": site, "remote_dir": remote_dir, "request": report_dict(request, profile)}
    if dry_run:
        text = _plan_text(plan, dry=True) + "\n" + "\n".join(report)
        emit(as_json, {"ok": True, "dry_run": True, **plan.to_json(), **extra}, text)
        return extra
    _run_export(schedd, ledger, plan, jobs, site, as_json, extra, info, report)
    return extra


def _run_export(
    schedd: LocalSchedd,
    ledger: Ledger,
    plan: export_mod.Plan,
    jobs: list[dict],
    site: str | None,
    as_json: bool,
    extra: dict,
    info: dict | None = None,
    report: list[str] | None = None,
) -> None:
    with for_command(as_json).task("copying inputs", plan.input_bytes) as advance:
        manifest = export_mod.run_export(
            schedd, ledger, plan, jobs, site=site, info=info, progress=advance
        )
    data = {
        "ok": True,
        **plan.to_json(),
        **extra,
        "files": len(manifest.files),
        "bytes": manifest.total_bytes(),
    }
    text = _plan_text(plan, dry=False)
    if report:
        text += "\n" + "\n".join(report) + f"\nnext: condor_lumberjack ship {plan.name}"
    emit(as_json, data, text)


def _plan_text(plan: export_mod.Plan, dry: bool) -> str:
    verb = "would export" if dry else "exported"
    return (
        f"{verb} {len(plan.jobs)} jobs in {len(plan.clusters)} clusters of {plan.owner} "
        f"as {plan.name!r}\n"
        f"  bundle:       {plan.bundle_dir}\n"
        f"  remote spool: {plan.remote_spool}\n"
        f"  inputs:       {plan.input_files} files, {plan.input_bytes} bytes"
    )


@cli.command("import")
@click.argument("name", required=False)
@click.option(
    "--in",
    "-in",
    "in_dir",
    type=click.Path(path_type=Path),
    help="An offline bundle whose spool/ holds the other schedd's spool.",
)
@click.option("--dry-run", is_flag=True, help="Check and show what would happen; change nothing.")
@json_option
def import_command(name: str | None, in_dir: Path | None, dry_run: bool, as_json: bool) -> None:
    """Bring results back: outputs where the submit file said, job ads merged.

    \b
    Examples:
      condor_lumberjack import --in /scratch/calib
      condor_lumberjack import calib --dry-run --json
    """
    ledger = Ledger()
    if in_dir is None and name and ledger.get(name).site:
        from lumberjack.state import lifecycle

        record = ledger.get(name)
        with ledger.lock(name):
            data = lifecycle.import_results(
                ledger, None if dry_run else LocalSchedd(), record, dry_run=dry_run
            )
        emit(as_json, {"ok": True, "dry_run": dry_run, **data}, _import_text(data, dry_run))
        return
    if in_dir is not None:
        bundle_dir, spool = importer.find_returned_spool(in_dir.resolve())
    elif name:
        record = ledger.get(name)
        bundle_dir, spool = importer.find_returned_spool(record.bundle_dir)
    else:
        raise BadInput("give an export NAME or --in DIR")
    schedd = None if dry_run else LocalSchedd()
    report = importer.run_import(schedd, bundle_dir, spool, dry_run=dry_run)
    record = ledger.find(report.name)
    if record and not dry_run:
        ledger.set_phase(report.name, "imported")
    text = _import_text(report.to_json(), dry_run)
    emit(as_json, {"ok": True, "dry_run": dry_run, **report.to_json()}, text)


def _import_text(data: dict, dry_run: bool) -> str:
    return (
        f"{'would import' if dry_run else 'imported'} {data['jobs']} jobs of {data['name']!r}: "
        f"{data['completed']} completed, {data['handed_back_idle']} handed back idle; "
        f"{len(data['placements'])} output files"
    )


@cli.command("unexport")
@click.argument("name")
@click.option("--dry-run", is_flag=True, help="Show what would happen; change nothing.")
@json_option
def unexport_command(name: str, dry_run: bool, as_json: bool) -> None:
    """Hand an export's jobs back to the local schedd, unrun.

    Only for exports whose jobs are not running at a site (phase exported or failed).

    \b
    Example:
      condor_lumberjack unexport calib
    """
    ledger = Ledger()
    record = ledger.get(name)
    if record.phase not in ("selected", "exporting", "exported", "failed", "shipped"):
        raise BadInput(f"export {name!r} is {record.phase}; fetch and import it instead")
    if dry_run:
        emit(
            as_json,
            {"ok": True, "dry_run": True, "clusters": record.clusters},
            f"would hand back clusters {record.clusters}",
        )
        return
    with ledger.lock(name):
        count = LocalSchedd().unexport(record.clusters)
        ledger.set_phase(name, "unexported")
    emit(
        as_json,
        {"ok": True, "jobs": count, "clusters": record.clusters},
        f"handed {count} jobs of {name!r} back to the local schedd",
    )


@cli.command("exports")
@json_option
def exports_command(as_json: bool) -> None:
    """List every export in the ledger with its phase.

    \b
    Example:
      condor_lumberjack exports --json
    """
    records = Ledger().list()
    lines = [f"{'NAME':24} {'PHASE':11} {'SITE':12} JOBS  BUNDLE"]
    for r in records:
        lines.append(f"{r.name:24} {r.phase:11} {r.site or '-':12} {len(r.jobs):<5} {r.bundle_dir}")
    emit(as_json, {"ok": True, "exports": [r.to_json() for r in records]}, "\n".join(lines))
