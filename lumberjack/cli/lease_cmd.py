"""`lease create|status|share|extend|shutdown` and `leases`: a central manager and pilots
at a site that exports join with `export --lease NAME` (see state/leases.py)."""

from __future__ import annotations

import posixpath
import time
from typing import Any

import click

from lumberjack.ap.names import check_name
from lumberjack.cli import cli
from lumberjack.cli.common import emit, json_option, plural
from lumberjack.cli.completion import complete_lease, complete_site
from lumberjack.cli.request_options import (
    request_from_options,
    request_options,
    show_script_option,
    shown_scripts,
)
from lumberjack.core.contract import lease_dir_name
from lumberjack.errors import BadInput
from lumberjack.state.ledger import LeaseRecord, Ledger, lease_key
from lumberjack.state.phases import LeasePhase

dry_run_option = click.option(
    "--dry-run", is_flag=True, help="Show what would be done; change nothing."
)


@cli.group("lease")
def lease_group() -> None:
    """A lease: a remote pool's collector + negotiator and its pilots at one site, for
    their walltime; exports join it with `export --lease NAME` and leave it when fetched.

    A lease is its owner's; only the owner's jobs join it, and those of the local users
    it is shared with (`--share-with`, `lease share`). Each export keeps its own schedd
    and trust domain at the site: sharing the pilots shares no jobs.

    \b
    Examples:
      condor_lumberjack lease create calib --site anvil --nodes 4 --walltime 4h \\
          --allocation abc123456
      condor_lumberjack export -c 'JobBatchName == "calib"' --lease calib
      condor_lumberjack lease status calib
      condor_lumberjack lease shutdown calib
    """


def _lease_for(name: str, verb: str) -> tuple[Ledger, LeaseRecord]:
    """The ledger and the lease `name`; BadInput when its phase does not allow `verb`."""
    from lumberjack.state.phases import lease_move

    ledger = Ledger()
    record = ledger.get_lease(name)
    lease_move(record.phase, verb, name)
    return ledger, record


def _site(record: LeaseRecord) -> Any:
    from lumberjack.profiles.sites import find_profile
    from lumberjack.state.steps import Site

    return Site(find_profile(record.site))


@lease_group.command("create")
@click.argument("name")
@click.option(
    "--site", required=True, shell_complete=complete_site,
    help="Site profile the lease runs at (see `sites list`).",
)  # fmt: skip
@click.option("--owner", help="Whose lease it is (root only; default: who runs this).")
@click.option(
    "--share-with", metavar="USER[,USER...]",
    help="Local users whose jobs may join it too, each in exports of their own "
    "(default: nobody).",
)  # fmt: skip
@request_options
@dry_run_option
@show_script_option
@json_option
def create_command(
    name: str,
    site: str,
    owner: str | None,
    share_with: str | None,
    dry_run: bool,
    show_script: bool,
    as_json: bool,
    **flags: Any,
) -> None:
    """Start a lease's central manager at SITE and submit its pilots at once: they wait
    in the batch queue while jobs are exported and shipped. Each pilot's nodes end after
    --idle-shutdown without a job; the lease ends when its pilots are gone and no export
    in it waits (`sync`), or with `lease shutdown`. Only the owner's jobs join it, and
    those of the users it is shared with; each export keeps its own schedd and trust
    domain at the site, so one user's export cannot see or touch another's jobs.

    \b
    Examples:
      condor_lumberjack lease create calib --site testbed --nodes 2 --walltime 30m
      condor_lumberjack lease create big --site anvil --nodes 8 --pilots 2 \\
          --allocation abc123456 --dry-run --show-script
      condor_lumberjack lease create group --site anvil --nodes 4 --walltime 4h \\
          --allocation abc123456 --owner alice --share-with bob,carol   # root, for a group
    """
    from lumberjack.profiles.request import report_dict, report_lines
    from lumberjack.profiles.sites import find_profile
    from lumberjack.state import leases
    from lumberjack.state.steps import Site

    check_name(name, "lease")
    if show_script and not dry_run:
        raise BadInput(
            "--show-script goes with --dry-run: it shows the scripts before anything is submitted"
        )
    profile = find_profile(site)
    leases.check_site(profile)
    shared = leases.sharing(owner, share_with)
    request = request_from_options(profile, **flags)
    leases.check_request(request, profile)
    ledger = Ledger()
    found = ledger.find_lease(name)
    if found is not None and (found.phase != LeasePhase.CREATING or found.site != site):
        raise BadInput(
            f"a lease named {name!r} already exists (site {found.site}, {found.phase}); "
            "choose another name"
        )
    report = report_lines(request, profile)
    if dry_run:
        scripts, script_text = ({}, "")
        if show_script:
            root = posixpath.join(profile.base_dir, lease_dir_name(name))
            scripts, script_text = shown_scripts(request, profile, root)
        emit(as_json, {"ok": True, "dry_run": True, "name": name, "site": site, **shared,
                       "request": report_dict(request, profile), **scripts},
             f"would create lease {name!r} at {site} for {_members(shared)}\n"
             + "\n".join(report) + script_text)  # fmt: skip
        return
    with ledger.lock(lease_key(name)), Site(profile) as connection:
        result = leases.create(ledger, connection, name, request, shared)
    record = ledger.get_lease(name)
    pilots = result.get("pilots", {}).get("submitted", [])
    emit(as_json, {"ok": True, **record.to_json(), **result},
         f"lease {name!r} at {site} is {record.phase}: pilots {', '.join(pilots) or 'none new'}\n"
         f"  for {_members(shared)}\n"
         + "\n".join(report)
         + f"\nnext: condor_lumberjack export ... --lease {name}")  # fmt: skip


@lease_group.command("status")
@click.argument("name", shell_complete=complete_lease)
@json_option
def status_command(name: str, as_json: bool) -> None:
    """The lease's pilots, the startds they run, the schedds of the exports that joined.

    \b
    Example:
      condor_lumberjack lease status calib --json
    """
    from lumberjack.state import leases

    ledger = Ledger()
    record = ledger.get_lease(name)
    with _site(record) as site:
        answer = leases.status(ledger, site, record)
    pilots = ", ".join(f"{j} {s}" for j, s in answer.get("pilots", {}).items()) or "none"
    startds = answer.get("startds", [])
    busy = sum(1 for s in startds if s.get("state") == "Claimed")
    lines = [f"    {line}" for line in _accounting_lines(answer["exports"])] or ["    none"]
    emit(as_json, {"ok": True, **record.to_json(), **answer},
         f"lease {name}: {record.phase} at {record.site}\n"
         f"  for:     {_members(record.to_json())}\n  pilots:  {pilots}\n"
         f"  startds: {len(startds)} ({busy} claimed)\n  exports:\n"
         + "\n".join(lines))  # fmt: skip


def _members(shared: dict[str, Any]) -> str:
    if shared.get("owner") is None:
        return "anyone (recorded before leases had owners)"
    others = ", ".join(shared.get("share_with") or []) or "nobody"
    return f"{shared['owner']}, shared with {others}"


def _accounting_lines(exports: list[dict[str, Any]]) -> list[str]:
    """One line per joined export: its owner, phase and what the lease's pool counts."""
    lines = []
    for e in exports:
        line = f"{e['name']} ({e['phase']}, {e.get('owner') or '?'})"
        used = e.get("accounting")
        if used:
            line += (
                f": {used['running']} running, {used['idle']} idle, "
                f"{used['usage_s']} slot-s used ({used['weighted_usage_s']} core-s)"
            )
        lines.append(line)
    return lines


@lease_group.command("share")
@click.argument("name", shell_complete=complete_lease)
@click.option(
    "--add", metavar="USER[,USER...]", help="Local users whose jobs may join too (default: none)."
)
@click.option(
    "--remove", metavar="USER[,USER...]", help="Users whose jobs may join no more (default: none)."
)
@json_option
def share_command(name: str, add: str | None, remove: str | None, as_json: bool) -> None:
    """Change whose jobs may join the lease (its owner or root). Exports that joined
    already stay until they are fetched.

    \b
    Examples:
      condor_lumberjack lease share calib --add bob,carol
      condor_lumberjack lease share calib --remove carol
    """
    from lumberjack.state import leases

    if not add and not remove:
        raise BadInput("give --add USER or --remove USER")
    ledger = Ledger()
    record = ledger.get_lease(name)
    if record.phase == LeasePhase.ENDED:
        raise BadInput(f"lease {name!r} has ended; nothing to share")
    with ledger.lock(lease_key(name)):
        result = leases.share(ledger, record.name, add, remove)
    emit(as_json, {"ok": True, "name": name, **result},
         f"lease {name}: for {_members(result)}")  # fmt: skip


@lease_group.command("extend")
@click.argument("name", shell_complete=complete_lease)
@dry_run_option
@json_option
def extend_command(name: str, dry_run: bool, as_json: bool) -> None:
    """Submit one more round of the lease's pilots (as many as it was created with),
    whatever is queued or running: more nodes now, or a new round before the walltime.
    At a site that runs the schedd inside the allocation one round at a time holds the
    lease's pool: there it is refused while a round is queued or running.

    \b
    Example:
      condor_lumberjack lease extend calib
    """
    from lumberjack.state import leases

    ledger, record = _lease_for(name, "extend")
    if dry_run:
        emit(as_json, {"ok": True, "dry_run": True, "name": name, "phase": record.phase},
             f"would submit another round of pilots for lease {name!r}")  # fmt: skip
        return
    with ledger.lock(lease_key(name)), _site(record) as site:
        result = leases.extend(ledger, site, record)
    new = result["pilots"].get("submitted", [])
    emit(as_json, {"ok": True, "name": name, **result},
         f"lease {name}: {plural(len(new), 'pilot')} submitted ({', '.join(new)})")  # fmt: skip


@lease_group.command("shutdown")
@click.argument("name", shell_complete=complete_lease)
@click.option(
    "--force", is_flag=True,
    help="Even while exports in it are not fetched (their jobs wait idle until fetched).",
)  # fmt: skip
@dry_run_option
@json_option
def shutdown_command(name: str, force: bool, dry_run: bool, as_json: bool) -> None:
    """Cancel the lease's pilots, stop its central manager and remove its directory at
    the site. Refused while an export in it is not fetched yet (unless --force).

    \b
    Example:
      condor_lumberjack lease shutdown calib
    """
    from lumberjack.state import leases

    ledger, record = _lease_for(name, "shutdown")
    if dry_run:
        waiting = [r.name for r in leases.still_needed_by(ledger, name)]
        emit(as_json, {"ok": True, "dry_run": True, "name": name, "waiting": waiting},
             f"would shut lease {name!r} down" + (f" (still serving {', '.join(waiting)})"
                                                 if waiting else ""))  # fmt: skip
        return
    with ledger.lock(lease_key(name)), _site(record) as site:
        result = leases.shutdown(ledger, site, record, force=force)
    emit(as_json, {"ok": True, "name": name, "phase": ledger.get_lease(name).phase, **result},
         f"lease {name}: ended; pilots cancelled: "
         f"{', '.join(result.get('stop', {}).get('cancelled_pilots', [])) or 'none'}")  # fmt: skip


@cli.command("leases")
@json_option
def leases_command(as_json: bool) -> None:
    """List every lease in the ledger with its phase and the exports that joined it.

    \b
    Example:
      condor_lumberjack leases --json
    """
    ledger = Ledger()
    records = ledger.leases()
    lines = [f"{'NAME':24} {'PHASE':9} {'SITE':12} {'CREATED':20} EXPORTS"]
    data = []
    for r in records:
        joined = [e.name for e in ledger.joined(r.name)]
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created))
        lines.append(f"{r.name:24} {r.phase:9} {r.site:12} {created:20} {', '.join(joined) or '-'}")
        data.append({**r.to_json(), "exports": joined})
    if not records:
        lines = [f"no leases in {ledger.path}"]
    emit(as_json, {"ok": True, "ledger": str(ledger.path), "leases": data}, "\n".join(lines))
