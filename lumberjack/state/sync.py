"""Sync: take every export (and lease) as far as it goes now without waiting, by the
steps the phase table marks for sync; what cron and `run --wait` do.

Every command opens at most one SSH connection per site (steps.Site), on first use;
`sync` serves every export of a site over that one connection.
"""

from __future__ import annotations

from typing import Any, Callable

from lumberjack.core.answers import Acted, Status
from lumberjack.core.contract import ALIVE, QueueActions
from lumberjack.errors import LumberjackError
from lumberjack.state import leases, phases, queue_commands
from lumberjack.state.ledger import ExportRecord, Ledger
from lumberjack.state.lifecycle import (
    fetch,
    import_results,
    launch,
    over_at_site,
    refresh_status,
    ship,
)
from lumberjack.state.steps import Site, layout_of, reported, run_step, site_for

#: How many times `sync` submits pilots for an export before it asks a person.
MAX_PILOT_ROUNDS = 10


def advance(ledger: Ledger, site: Site, schedd: Any, name: str) -> list[str]:
    """Take one export as far as it goes now without waiting, by the steps the phase
    table marks for sync; the phases it stepped from (and "launch" for new pilots)."""
    done: list[str] = []
    while True:
        record = ledger.get(name)
        step = phases.sync_step(record.phase)
        if step == "status":
            _queue_commands(ledger, site, schedd, record, done)
            answer = refresh_status(ledger, site, record)
            _show_at_home(ledger, schedd, record, answer, done)
            if over_at_site(answer):  # held jobs too: fetch cancels the pilots
                continue
            if not _pilots_alive(answer) and answer.jobs.get("idle"):
                relaunch(ledger, site, ledger.get(name))  # the last pilots ended: more
                done.append("launch")
            return done
        if step == "ship":
            ship(ledger, site, record)
        elif step == "launch":
            launch(ledger, site, record)
        elif step == "fetch":
            fetch(ledger, site, record)
        elif step == "import":
            import_results(ledger, schedd, record)
        else:  # waits for a person, is done, or is not a site's (rollback: see sync)
            return done
        done.append(record.phase.value)


def _queue_commands(
    ledger: Ledger, site: Site, schedd: Any, record: ExportRecord, done: list[str]
) -> None:
    """The local queue's commands to the site before its status is asked: a removal
    there is then seen in the same round. A failure is noted, never in the way of the
    status (the next sync sends the commands again)."""

    def send(actions: QueueActions) -> Acted:
        layout = layout_of(record)
        answer: Acted = run_step(ledger, record.name, "queue",
                                 lambda: site.act(layout, actions))  # fmt: skip
        return answer

    try:
        answer = queue_commands.forward(ledger, schedd, record, send)
    except LumberjackError as exc:
        done.append(f"queue commands: {exc}")
        return
    if answer is not None:
        done.append("queue commands: " + ", ".join(
            f"{a.action} {a.job} ({a.result})" for a in answer.actions
        ))  # fmt: skip


def _show_at_home(
    ledger: Ledger, schedd: Any, record: ExportRecord, answer: Status, done: list[str]
) -> None:
    """condor_q's view of the jobs at home, from the status answer (docs/condor-q.md)."""
    try:
        queue_commands.show(schedd, ledger.get(record.name), answer)
    except LumberjackError as exc:
        done.append(f"condor_q attributes: {exc}")


def relaunch(ledger: Ledger, site: Site, record: ExportRecord) -> None:
    """New pilots for jobs left idle when the last ones ended, at most MAX_PILOT_ROUNDS
    times: jobs that never start (a requirement no node meets) must not burn the
    allocation forever."""
    rounds = int(record.info.get("pilot_rounds", 1))
    if rounds >= MAX_PILOT_ROUNDS:
        raise LumberjackError(
            f"{record.name}: {rounds} rounds of pilots ended with jobs still idle; see "
            f"`status {record.name}`, then `fetch` and `import` to bring them home"
        )
    ledger.update_info(record.name, pilot_rounds=rounds + 1)
    launch(ledger, site, record)


def _pilots_alive(answer: Status) -> bool:
    return any(state in ALIVE for state in answer.pilots.values())


def sync(
    ledger: Ledger,
    *,
    names: tuple[str, ...] = (),
    dry_run: bool = False,
    schedd: Any = None,
    open_site: Callable[[ExportRecord], Site] | None = None,
    sites: dict[str, Site] | None = None,
) -> list[dict[str, Any]]:
    """Advance every export (or those named) as far as it goes now; never waits for a
    lock another process holds. One line of result per export, errors included.
    A step that fails leaves the phase as it was (recorded as a failed step), so the
    next sync tries again.

    One connection per site serves all its exports: `sites` (site name -> Site) holds
    them; a caller that passes its own (`sync --watch`, `run --wait`) keeps them open
    across calls and closes them, otherwise they are closed here. `open_site` makes a
    missing one (default: `site_for` without `hold`, as cron has nobody to ask)."""
    own_sites = sites is None
    sites = {} if sites is None else sites
    open_site = open_site or (lambda record: site_for(record, hold=False))
    try:
        results: list[dict[str, Any]] = []
        whole = not names and not dry_run
        if whole and ledger.leases():  # jobs opted into a lease go first: then they ship
            if schedd is None:
                schedd = _LocalScheddOnFirstUse()
            results += leases.export_opted_in(ledger, schedd, sites)
        results += _sync(ledger, names, dry_run, schedd, open_site, sites)
        if whole and ledger.leases():  # after the exports: they may still need a lease
            results += leases.sync(ledger, sites)
        return results
    finally:
        if own_sites:
            for site in sites.values():
                site.close()


def _sync(
    ledger: Ledger,
    names: tuple[str, ...],
    dry_run: bool,
    schedd: Any,
    open_site: Callable[[ExportRecord], Site],
    sites: dict[str, Site],
) -> list[dict[str, Any]]:
    records = [r for r in ledger.list() if not names or r.name in names]
    if not dry_run:
        _prefetch_status(records, open_site, sites)
    results = []
    for record in records:
        step = phases.sync_step(record.phase)
        if step is None:
            continue
        entry: dict[str, Any] = {"name": record.name, "phase": record.phase.value}
        if dry_run:
            entry["would"] = "recover" if step == "rollback" else "advance"
            results.append(entry)
            continue
        with reported(entry), ledger.lock(record.name):
            if schedd is None:
                schedd = _LocalScheddOnFirstUse()
            current = ledger.get(record.name)
            if phases.sync_step(current.phase) == "rollback":
                entry["steps"] = [recover_exporting(ledger, schedd, current)]
            elif current.site:
                if current.site not in sites:
                    sites[current.site] = open_site(current)
                entry["steps"] = advance(ledger, sites[current.site], schedd, record.name)
        entry["phase"] = ledger.get(record.name).phase.value
        results.append(entry)
    return results


def _prefetch_status(
    records: list[ExportRecord],
    open_site: Callable[[ExportRecord], Site],
    sites: dict[str, Site],
) -> None:
    """Ask each site for the status of all its exports that sync will ask about, in one
    call (see Site.prefetch_status); a site that cannot be reached is left to the
    export-by-export loop, which reports it. Answers a round left unused (an export
    another process held) are dropped: a kept site (`sync --watch`) asks afresh."""
    for site in sites.values():
        site.statuses.clear()
    waiting: dict[str, list[ExportRecord]] = {}
    for record in records:
        if record.site and phases.sync_step(record.phase) == "status":
            waiting.setdefault(record.site, []).append(record)
    for name, group in waiting.items():
        if len(group) < 2:
            continue
        try:
            if name not in sites:
                sites[name] = open_site(group[0])
            sites[name].prefetch_status([layout_of(record) for record in group])
        except LumberjackError:
            continue


class _LocalScheddOnFirstUse:
    """The local schedd, reached only when a step needs it: a status round (the queue's
    commands, condor_q's attributes) or an import; a sync of exports that wait for a
    person, or are home, never does."""

    def __init__(self) -> None:
        self._schedd: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._schedd is None:
            from lumberjack.ap.schedd import LocalSchedd

            self._schedd = LocalSchedd()
        return getattr(self._schedd, name)


def recover_exporting(ledger: Ledger, schedd: Any, record: ExportRecord) -> str:
    """An export that crashed between the schedd's export and a complete bundle: its
    jobs go back to the local schedd (the bundle never left this machine)."""
    from lumberjack.ap.export import remove_bundle
    from lumberjack.state.exporting import rollback

    rollback(schedd, ledger, record.name, record.clusters, reason="recovered by sync after a crash")
    remove_bundle(record.bundle_dir, record.owner)
    return "recovered: jobs handed back to the local schedd"
