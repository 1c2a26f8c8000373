"""`import`: results back from a site, or from a bundle handed in (`import --in`).

A module of its own: a run of `import` loads only what importing needs (not the site
profiles' models that `export` checks a request against).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import click

from lumberjack.ap import importer
from lumberjack.ap.bundle import read_manifest_once
from lumberjack.ap.checkpoint_home import NOT_CHECKPOINTING
from lumberjack.ap.schedd import LocalSchedd
from lumberjack.cli import cli
from lumberjack.cli.common import emit, json_option, plural
from lumberjack.cli.completion import complete_export
from lumberjack.errors import BadInput
from lumberjack.host.identity import acting_as, owner_of_path
from lumberjack.state import phases
from lumberjack.state.ledger import Ledger
from lumberjack.state.phases import Phase


@cli.command("import")
@click.argument("name", required=False, shell_complete=complete_export)
@click.option(
    "--in",
    "-in",
    "in_dir",
    type=click.Path(path_type=Path),
    help="An offline bundle whose spool/ holds the other schedd's spool.",
)
@click.option("--dry-run", is_flag=True, help="Check and show what would happen; change nothing.")
@click.option(
    "--verbose", "-v", is_flag=True,
    help="Name, per job, every attribute the site changed that was not merged "
    "(without: one summary line).",
)  # fmt: skip
@json_option
def import_command(
    name: str | None, in_dir: Path | None, dry_run: bool, verbose: bool, as_json: bool
) -> None:
    """Bring results back: outputs where the submit file said, job ads merged.

    Each job gets its results and usage (status, exit code, hold reason, times, CPU,
    memory, disk, transfer statistics), checked; a job held at the site comes back
    held. Safe to repeat: outputs already in place are not placed again, and the
    schedd merges only jobs still managed externally.

    \b
    Examples:
      condor_lumberjack import --in /scratch/calib
      condor_lumberjack import calib --dry-run --json
      condor_lumberjack import calib --verbose
    """
    ledger = Ledger()
    if in_dir is None and name and ledger.get(name).site:
        from lumberjack.state import lifecycle

        record = ledger.get(name)
        with ledger.lock(name):
            data = lifecycle.import_results(
                ledger, None if dry_run else LocalSchedd(), record, dry_run=dry_run
            )
        again = record.phase == Phase.IMPORTED
        data = {"ok": True, "dry_run": dry_run, **data, "already_imported": again}
        emit(as_json, data, _import_text(data, dry_run, again, verbose))
        return
    if in_dir is None and not name:
        raise BadInput("give an export NAME or --in DIR")
    given = in_dir if in_dir is not None else ledger.get(name).bundle_dir
    # A bundle handed in belongs to a user: it is read as that user, never as root.
    reader = owner_of_path(str(given))
    with acting_as(reader):
        bundle_dir, spool = importer.find_returned_spool(given.resolve())
        # Read once: the import checks these very bytes against the ledger's digest.
        read = read_manifest_once(bundle_dir)
    # A bundle from elsewhere has no ledger entry; one of ours must be in a phase to import.
    record = ledger.find(read.manifest.name)
    if record is not None:
        phases.check(record.phase, "import --in", record.name)
    owner = record.owner if record is not None and record.owner else read.manifest.owner
    if reader is not None and reader.name != owner:
        raise BadInput(f"{given} belongs to {reader.name}, but its jobs are {owner}'s; refusing")
    schedd = None if dry_run else LocalSchedd()
    digest = record.info.get("manifest_sha256") if record is not None else None
    tag = hashlib.sha256(str(bundle_dir).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    report = importer.run_import(
        schedd, bundle_dir, spool, work_dir=ledger.work_dir(f"in-{tag}", area="offline"),
        owner=owner, bundle_reader=reader, spool_reader=reader, dry_run=dry_run,
        manifest_sha256=digest, read=read, site=record.site if record is not None else None,
    ).to_json()  # fmt: skip
    if record is not None and not dry_run:
        ledger.move(record.name, "import --in")
    again = record is not None and record.phase == Phase.IMPORTED
    data = {"ok": True, "dry_run": dry_run, **report, "already_imported": again}
    emit(as_json, data, _import_text(data, dry_run, again, verbose))


def _import_text(data: dict, dry_run: bool, again: bool, verbose: bool = False) -> str:
    jobs, files = plural(data["jobs"], "job"), plural(len(data["placements"]), "output file")
    if again and not dry_run:
        return f"nothing new: {data['name']!r} was imported already ({jobs}, {files} in place)"
    head = (
        f"{'would import' if dry_run else 'imported'} {jobs} of {data['name']!r}: "
        f"{data['completed']} completed, {data['handed_back_idle']} handed back idle; "
    )
    if dry_run:
        return head + f"{files} to place"
    placed = plural(data["files_placed"], "output file")
    before = len(data["placements"]) - data["files_placed"]
    text = head + f"{placed} placed" + (f" ({before} already in place)" if before else "")
    return text + "".join(f"\n{line}" for line in _reported(data, verbose))


def _reported(data: dict, verbose: bool = False) -> list[str]:
    """One line for each kind of thing the site sent that import did not take (with
    `verbose`, the site's changes one line per ad)."""
    lines = []
    held = data.get("held_at_site") or []
    if held:
        lines.append(f"{plural(len(held), 'job')} held at the site, held here too: {_some(held)} "
                     f"(condor_lumberjack logs {data['name']} --job ID)")  # fmt: skip
    resume = data.get("resume_from_site") or []
    if resume:
        verb = "resumes" if len(resume) == 1 else "resume"
        lines.append(f"{plural(len(resume), 'unfinished job')} {verb} from its site "
                     f"checkpoint: {_some(resume)}")  # fmt: skip
    anew: dict[str, list[str]] = {}
    for job, why in (data.get("start_anew") or {}).items():
        if why != NOT_CHECKPOINTING:  # the jobs that do not checkpoint: no news (--json has them)
            anew.setdefault(why, []).append(job)
    for why, jobs in sorted(anew.items()):
        verb = "starts" if len(jobs) == 1 else "start"
        lines.append(f"{plural(len(jobs), 'unfinished job')} {verb} anew ({why}): {_some(jobs)}")
    if data.get("not_sent"):
        lines.append(f"ignored ads this export never sent: {', '.join(data['not_sent'])}")
    if data.get("missing"):
        lines.append(f"jobs missing from the returned queue: {', '.join(data['missing'])}")
    changes = data.get("site_changes", {})
    if changes and verbose:
        for key, change in sorted(changes.items()):
            names = ", ".join(n for kind in ("changed", "added", "removed", "refused")
                              for n in change.get(kind, []))  # fmt: skip
            lines.append(f"{key}: site changed, not merged: {names}")
    elif changes:
        lines.append(_changes_summary(changes))
    for job, events in sorted(data.get("events", {}).items()):
        dropped = events.get("dropped") or {}
        if dropped:
            why = ", ".join(f"{n} {reason}" for reason, n in sorted(dropped.items()))
            lines.append(f"{job}: user-log events dropped: {why}")
    return lines


def _some(jobs: list[str]) -> str:
    return ", ".join(jobs[:5]) + (f" and {len(jobs) - 5} more" if len(jobs) > 5 else "")


def _changes_summary(changes: dict[str, dict[str, list[str]]]) -> str:
    """One line for the site's changes that were not merged, whatever the jobs' count."""
    counts: dict[str, int] = {}
    for change in changes.values():
        for names in change.values():
            for name in names:
                counts[name] = counts.get(name, 0) + 1
    top = sorted(counts, key=lambda n: (-counts[n], n.lower()))
    shown = ", ".join(f"{n} ({counts[n]})" for n in top[:6])
    more = f" and {len(top) - 6} more" if len(top) > 6 else ""
    return (f"site changed {plural(len(top), 'attribute')} in {plural(len(changes), 'ad')}, "
            f"not merged: {shown}{more} (--verbose: each ad)")  # fmt: skip
