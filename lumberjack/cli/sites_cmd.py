"""`condor_lumberjack sites list | show SITE | check SITE [jobs] [request flags]`."""

from __future__ import annotations

import posixpath
from typing import Any

import click

from lumberjack.ap.export import Selection
from lumberjack.cli import cli
from lumberjack.cli.common import (
    LumberjackGroup,
    emit,
    json_option,
    selection_options,
    text_table,
)
from lumberjack.cli.completion import complete_site
from lumberjack.cli.request_options import (
    SHOWN_EXPORT,
    request_from_options,
    request_options,
    show_script_option,
    shown_scripts,
)
from lumberjack.cli.site_image_cmd import image
from lumberjack.core.units import format_memory, format_walltime
from lumberjack.profiles.model import SiteProfile
from lumberjack.profiles.request import report_dict, report_lines
from lumberjack.profiles.sites import (
    check_not_retired,
    find_profile,
    load_profiles,
    profile_dirs,
)


@cli.group("sites", cls=LumberjackGroup)
def sites() -> None:
    """The HPC sites lumberjack knows (one profile file each) and their limits.

    \b
    Examples:
      condor_lumberjack sites list
      condor_lumberjack sites show perlmutter
      condor_lumberjack sites check perlmutter --nodes 4 --walltime 2h --allocation m1234
    """


@sites.command("list")
@click.option(
    "--wide", is_flag=True, help="Every queue and the whole system name (wider than 100 columns)."
)
@json_option
def list_cmd(wide: bool, as_json: bool) -> None:
    """List every site profile found: name, system, batch system, queues (--wide: and
    login host).

    The default queue is marked with "*" (the others are counted; --wide names them).
    Profiles come from the ones shipped with
    lumberjack (site-profiles/), $LUMBERJACK_SITE_PROFILES and
    ~/.config/condor-lumberjack/sites.

    \b
    Example:
      condor_lumberjack sites list --json
    """
    profiles, broken = load_profiles()
    for line in broken:  # reported, and the other profiles still listed
        click.echo(line, err=True)
    data = [
        {
            "name": p.name,
            "system": p.system,
            "batch_system": p.batch_system,
            "queues": [q.name for q in p.queues],
            "default_queue": p.default_queue.name,
            "login_host": p.login_host,
            "retired": p.retired,
            "tested": p.tested,
            "path": str(p.path),
        }
        for p in profiles
    ]
    emit(as_json, {"ok": True, "sites": data}, _list_text(profiles, wide))


@sites.command("show")
@click.argument("site", shell_complete=complete_site)
@json_option
def show_cmd(site: str, as_json: bool) -> None:
    """Show everything a site's profile says: login, paths, container, queues, defaults.

    \b
    Example:
      condor_lumberjack sites show polaris
    """
    profile = find_profile(site)
    emit(as_json, profile.to_dict(), _show_text(profile))


@sites.command("check")
@click.argument("site", shell_complete=complete_site)
@selection_options
@request_options
@show_script_option
@json_option
def check_cmd(
    site: str,
    constraint: str | None,
    ids: tuple[str, ...],
    more_ids: tuple[str, ...],
    show_script: bool,
    as_json: bool,
    **request_flags: Any,
) -> None:
    """Check a resource request against a site's limits, without contacting the site.

    Prints each value, where it came from and the flag that changes it, the most the
    pilots can be charged (node-hours; warnings for nodes raised to a queue's minimum
    and for part of a node on a whole-node queue), and the slot ad
    each pilot node will advertise (what `export` matches the jobs against); exits with
    code 2 and a one-line error when the request breaks a limit of the queue. With jobs
    (-c or ids) the request follows them as in `export`, and every job is matched
    against that slot, as `export --dry-run` does: a cluster that could never run there
    is one line with the reason and the fix, and exit code 2. Only the local schedd is
    asked; nothing changes. --show-script prints each pilot's batch script (for an
    export named EXPORT; paths under the profile's base_dir as written).

    \b
    Examples:
      condor_lumberjack sites check perlmutter --allocation m1234
      condor_lumberjack sites check perlmutter --queue debug-cpu --nodes 16 --pilots 2 \\
          --walltime 20m --allocation m1234
      condor_lumberjack sites check testbed -c 'JobBatchName == "calib"'
      condor_lumberjack sites check polaris --queue prod-small --walltime 3h \\
          --allocation abc --show-script
    """
    from lumberjack.ap.matchmaking import site_slot, slot_summary
    from lumberjack.profiles.isolation import isolation_note, isolation_of
    from lumberjack.transport.login_account import login_account

    all_ids = tuple(i for chunk in ids + more_ids for i in chunk.replace(",", " ").split())
    selection = Selection(constraint, all_ids) if constraint or all_ids else None
    if selection is not None:
        selection.check()  # the input first: no schedd is asked about a typo
    profile = find_profile(site)
    check_not_retired(profile)  # as export does: a request there could never be used
    request = request_from_options(profile, **request_flags)  # the flags, before any schedd
    matched: dict[str, Any] = {}
    matched_lines: list[str] = []
    if selection is not None:
        from lumberjack.ap import matchmaking
        from lumberjack.ap.schedd import LocalSchedd
        from lumberjack.state.site_export import check_selection

        request, analysis = check_selection(LocalSchedd(), selection, site, request_flags)
        matched = {"matchmaking": analysis.to_json()}
        matched_lines = matchmaking.report_lines(analysis)
    note = isolation_note(profile)
    account = login_account(profile)  # what the guard compares, whatever the profile's name
    slot = site_slot(profile, request)
    scripts, script_text = ({}, "")
    if show_script:
        root = posixpath.join(profile.base_dir, SHOWN_EXPORT)
        scripts, script_text = shown_scripts(request, profile, root)
    emit(
        as_json,
        {"ok": True, **report_dict(request, profile), "isolation": isolation_of(profile),
         "isolation_note": note, "site_account": account, "slot_ad": slot, **matched,
         **scripts},
        "\n".join([*report_lines(request, profile),
                   f"other owners: on site account {account}, {note}",
                   f"slot ad: {slot_summary(slot)} (each pilot node; --json: all of it)",
                   *matched_lines]) + script_text,
    )  # fmt: skip


#: `sites list` fits a terminal this wide (without --wide).
LIST_COLUMNS = 100


def _list_text(profiles: list[SiteProfile], wide: bool = False) -> str:
    if not profiles:
        searched = ", ".join(str(path) for path in profile_dirs())
        return f"no site profiles found (searched: {searched})"
    rows = [["NAME", "SYSTEM", "BATCH", "TESTED", "QUEUES"] + (["LOGIN HOST"] if wide else [])]
    for p in profiles:
        default = p.default_queue.name + "*"
        others = [q.name for q in p.queues if q.name != p.default_queue.name]
        if wide:
            rows.append([p.name, p.system, p.batch_system, _tested_word(p),
                         ", ".join([default, *others]), p.login_host])  # fmt: skip
        else:
            rows.append([p.name, p.system, p.batch_system, _tested_word(p),
                         default + (f" +{len(others)}" if others else "")])  # fmt: skip
    if not wide:  # a long system name gives way: the other columns are needed whole
        rest = sum(max(len(row[i]) for row in rows) + 2 for i in (0, 2, 3, 4))
        room = max(LIST_COLUMNS - rest, len("SYSTEM"))
        for row in rows:
            row[1] = row[1] if len(row[1]) <= room else row[1][: room - 3] + "..."
    return text_table(rows)


def _tested_word(p: SiteProfile) -> str:
    """The TESTED column: a word of the profile's `tested` (`sites show` has it whole)."""
    return {"end-to-end on the testbed": "end-to-end", "rendered only": "rendered"}.get(
        p.tested, p.tested
    )


def _show_text(p: SiteProfile) -> str:
    login = f"{p.user + '@' if p.user else ''}{p.login_host}:{p.port}"
    retired = f"  [RETIRED{f'; use {p.successor}' if p.successor else ''}]" if p.retired else ""
    lines = [f"{p.name}: {p.system}{retired}"]
    if p.description:
        lines.append(f"  {p.description}")
    fields = [
        ("profile", str(p.path.resolve())),  # absolute, whatever the current directory
        ("source", p.source + (f" (checked {p.checked})" if p.checked else "")),
        ("tested", p.tested + (f": {p.tested_note}" if p.tested_note else "")),
        ("login", login + ("" if p.user else "  (user: your ssh config or local name)")),
        (
            "auth",
            f"{p.auth}, connection sharing {'allowed' if p.connection_sharing else 'refused'}",
        ),
        ("known_hosts", p.known_hosts or "-"),
        ("identity", p.identity_file or "-"),
        ("base_dir", p.base_dir),
        ("scratch", p.scratch),
        ("batch", p.batch_system + (", allocation required" if p.allocation_required else "")),
        ("container", f"{p.container.runtime} {p.container.image}"),
        ("binds", ", ".join(p.container.bind) or "-"),
        ("schedd", _schedd_text(p)),
        ("launcher", p.batch.launcher or "default"),
        ("directives", "; ".join(p.batch.extra_directives) or "-"),
        ("setup", "; ".join(p.batch.setup) or "-"),
    ]
    if p.batch.chunk_resources:
        fields.append(("chunk", ":".join(p.batch.chunk_resources)))
    lines += [f"  {label:<12} {value}" for label, value in fields if value]
    lines.append("  queues (* = default):")
    rows = [["NAME", "NODES", "CORES", "MEMORY", "GPUS", "WALLTIME", "NOTES"]]
    for q in p.queues:
        notes = []
        if q.whole_node:
            notes.append("whole nodes")
        if q.batch_queue != q.name:
            notes.append(f"submits to {q.batch_queue!r}" if q.batch_queue else "no queue directive")
        notes.extend(q.directives)
        rows.append(
            [
                q.name + ("*" if q.name == p.default_queue.name else ""),
                f"{q.min_nodes}-{q.max_nodes}",
                str(q.cores_per_node),
                format_memory(q.memory_per_node_mb),
                str(q.gpus_per_node),
                format_walltime(q.max_walltime_s),
                "; ".join(notes),
            ]
        )
    lines += [f"    {row}" for row in text_table(rows).splitlines()]
    d = p.defaults
    defaults = [
        f"{label} {value}"
        for label, value in (
            ("nodes", d.nodes),
            ("cores", d.cores),
            ("memory", format_memory(d.memory_mb) if d.memory_mb is not None else None),
            ("gpus", d.gpus),
            ("walltime", format_walltime(d.walltime_s) if d.walltime_s is not None else None),
            ("allocation", d.allocation),
        )
        if value is not None
    ]
    lines.append(f"  {'defaults':<12} {', '.join(defaults) or '-'}")
    return "\n".join(lines)


def _schedd_text(p: SiteProfile) -> str:
    where = "on the login node" if p.schedd.placement == "login" else "in a batch job"
    port = f"port {p.schedd.port}" if p.schedd.port else "any free port"
    address = f", reached as {p.schedd.address}" if p.schedd.address else ""
    return f"{where}, {port}{address}"


sites.add_command(image)  # `sites image build`: its own module (lumberjack.cli.site_image_cmd)
