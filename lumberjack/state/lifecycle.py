"""The step table: an export's life at a site, one idempotent step per phase.

    exported --ship--> shipped --launch--> launched --(status: a job runs)--> running
    --(status: no job can run again)--> finished --fetch--> fetched --import--> imported
    --cleanup--> cleaned

(every move, and which of them `sync` takes, is in the table in phases.py).

Each step is recorded in the ledger before and after it acts (steps.run_step), runs
under the export's lock, and can be repeated: shipping again moves only what is missing,
launching again only submits pilots when idle jobs are left and none is queued or
running, fetching again re-verifies what came back. sync.py takes exports through them.
"""

from __future__ import annotations

import posixpath
import shlex
from pathlib import Path
from typing import Any, BinaryIO

from lumberjack.ap import bundle as bundle_mod
from lumberjack.ap import importer, matchmaking, site_logs
from lumberjack.ap.remote_layout import REMOTE_USERLOG_NAME
from lumberjack.core import crashpoints
from lumberjack.core.answers import Status
from lumberjack.core.contract import QUEUE_LOG, ExportLayout
from lumberjack.core.crashpoints import crash_point
from lumberjack.core.manifest import FileEntry
from lumberjack.core.records import to_json
from lumberjack.host.identity import acting_as, owner_of
from lumberjack.profiles.isolation import CONTAINED
from lumberjack.profiles.sites import check_not_retired
from lumberjack.state import phases, queue_commands
from lumberjack.state.isolation_guard import RAN_UNCONTAINED, check_isolation
from lumberjack.state.job_lookup import record_status
from lumberjack.state.ledger import ExportRecord, Ledger
from lumberjack.state.phases import Phase
from lumberjack.state.plans import check_runtime, condor_release, launch_plan, request_of
from lumberjack.state.steps import Site, check_phase, layout_of, run_step
from lumberjack.transport.transfer import open_plain

RETURNED = "returned"  # the remote spool as fetched, in this account's work dir
#: What comes back from the site's spool: the queue and each job's directory; not the
#: inputs (the access point has them) nor the schedd's own bookkeeping.
FETCH_EXCLUDE = (
    "lumberjack-inputs/*", "local_univ_execute/*", ".schedd_*", "*.lock", "Accountant*",
    "spool_version", "schedd_daemon_history*", ".job_queue.log.*",
)  # fmt: skip


def ship(ledger: Ledger, site: Site, record: ExportRecord) -> dict[str, Any]:
    """Bundle and agent to the site; only missing or changed files move; verified."""
    check_phase(record, "ship")
    if record.phase == Phase.EXPORTED:  # inputs must not land beside another owner's jobs
        check_isolation(ledger, record, site.profile, record.info.get("shared_account", False))
    layout = layout_of(record)

    # The bundle is the owner's: root reads it only as the owner, a regular file never
    # through a link (bounded_read: a link, FIFO or device in its place is refused), and
    # the manifest only as the ledger recorded it, no longer than export wrote it.
    owner = owner_of(record.owner) if record.owner else None

    def open_source(path: Path) -> BinaryIO:
        with acting_as(owner):
            return open_plain(path)

    def act() -> dict[str, Any]:
        read = bundle_mod.read_manifest_once(
            record.bundle_dir, record.info.get("manifest_bytes"), owner
        )
        manifest = importer.load_checked_manifest(
            record.bundle_dir, record.info.get("manifest_sha256"), read
        )
        conn = site.conn
        # The export's directory is the site account's alone before anything lands in it.
        root = shlex.quote(layout.root)
        conn.run(f"mkdir -p {root} && chmod 700 {root}")
        crash_point("ship.before-upload")
        if crashpoints.armed() == "ship.mid-upload":  # half the files, as a cut link leaves
            conn.upload(record.bundle_dir / "spool", posixpath.join(layout.bundle, "spool"),
                        manifest.files[: max(1, len(manifest.files) // 2)],
                        open_source=open_source)  # fmt: skip
            crash_point("ship.mid-upload")
        report = conn.upload(
            record.bundle_dir / "spool",
            posixpath.join(layout.bundle, "spool"),
            manifest.files,
            progress=site.progress,
            open_source=open_source,
        )
        crash_point("ship.after-upload")
        conn.put_bytes(read.data, posixpath.join(layout.bundle, bundle_mod.MANIFEST), 0o600)
        site.put_agent(layout)
        release = ship_condor_release(site, layout)
        crash_point("ship.before-ledger")
        result = {"sent_files": report.sent_files, "sent_bytes": report.sent_bytes,
                  "skipped_files": report.skipped_files}  # fmt: skip
        if release is not None:
            result["condor_release"] = release
        return result

    result = run_step(ledger, record.name, "ship", act)
    ledger.move(record.name, "ship")
    return result


def ship_condor_release(site: Site, layout: ExportLayout) -> dict[str, Any] | None:
    """Runtime "none": the HTCondor tarball to the site, once per site (the transfer
    skips it when a file of the same sha256 is already there); the agent unpacks it."""
    check_runtime(site.profile)
    release = condor_release(site.profile, layout)
    if release is None:
        return None
    local = Path(release["local"])
    name = posixpath.basename(release["tarball"])
    entry = FileEntry(path=name, size=local.stat().st_size, sha256=release["sha256"])

    def open_release(_: Path) -> BinaryIO:
        # The transfer sends files by their path below a root (the site's name, here) and
        # opens none through a link (an owner's bundle); the tarball is the profile's
        # own file, which may well be a link (the testbed's is): opened as named.
        return open(local, "rb")  # the transfer closes it

    report = site.conn.upload(
        local.parent, posixpath.dirname(release["tarball"]), [entry], open_source=open_release
    )
    return {"tarball": release["tarball"], "sent_bytes": report.sent_bytes}


def launch(ledger: Ledger, site: Site, record: ExportRecord) -> dict[str, Any]:
    """Start the remote pool on the shipped queue and submit the pilots."""
    check_phase(record, "launch")
    check_not_retired(site.profile)
    check_runtime(site.profile)
    if record.phase == Phase.SHIPPED:  # a first launch; later rounds were allowed then
        check_isolation(ledger, record, site.profile, record.info.get("shared_account", False))
        if ledger.get(record.name).info.get("isolation") != CONTAINED:
            ledger.update_info(record.name, **{RAN_UNCONTAINED: True})
    layout = layout_of(record)

    def act() -> dict[str, Any]:
        plan = launch_plan(record, site.profile, layout)
        site.put_launch_plan(layout, plan)
        crash_point("launch.after-plan")
        answer = to_json(site.agent(layout, "launch"))
        crash_point("launch.before-ledger")
        return answer

    result = run_step(ledger, record.name, "launch", act)
    ledger.move(record.name, "launch")
    return result


def refresh_status(ledger: Ledger, site: Site, record: ExportRecord) -> Status:
    """Jobs by status and pilots, from the site, and the phase they mean recorded in the
    ledger: running once a job left idle there, finished when no job can run there
    again (over_at_site)."""
    check_phase(record, "status")
    layout = layout_of(record)
    answer: Status = site.statuses.pop(layout.root, None) or site.agent(layout, "status")
    record_status(ledger, record.name, answer)
    phase = ledger.get(record.name).phase  # now, not when the command started
    ledger.move(record.name, "status", status_phase(phase, answer))
    return answer


def never_match(site: Site, record: ExportRecord, answer: Status) -> list[str]:
    """Idle jobs no slot of the request could ever take (their ads may change at the
    site): one line per shape."""
    if "request" not in record.info:
        return []
    return matchmaking.never_match(answer.idle_shapes, site.profile, request_of(record.info))


def status_phase(phase: Phase, answer: Status) -> Phase:
    """The phase a status answer from the site means for an export in `phase`."""
    possible = phases.ends("status", phase)
    if over_at_site(answer) and Phase.FINISHED in possible:
        return Phase.FINISHED
    started = any(count for state, count in answer.jobs.items() if state != "idle")
    if started and Phase.RUNNING in possible:
        return Phase.RUNNING
    return phase


def over_at_site(answer: Status) -> bool:
    """Whether no job of the export can run at the site again: each completed, removed,
    or held with nothing there that would release it ("final"; an agent shipped before
    that field says only "finished", every job completed or removed)."""
    return answer.final or answer.finished


def fetch(ledger: Ledger, site: Site, record: ExportRecord) -> dict[str, Any]:
    """Stop the remote pool (its queue final), bring the spool back, verified.

    Jobs that had not finished come back too: import hands them to the local schedd as
    idle, so none is lost and none runs twice.
    """
    check_phase(record, "fetch")
    layout = layout_of(record)

    def act() -> dict[str, Any]:
        from lumberjack.transport.transfer import NoRoom, ReturnRefused  # loaded with the link

        stopped = site.agent(layout, "stop")
        returned = returned_dir(ledger, record)
        crash_point("fetch.after-stop")
        if crashpoints.armed() == "fetch.mid-download":  # the outputs, not yet the queue
            site.conn.download(layout.spool, returned,
                               exclude=(*FETCH_EXCLUDE, QUEUE_LOG))  # fmt: skip
            crash_point("fetch.mid-download")
        try:
            # A job over a per-job cap stays at the site but for its events: import
            # holds it (HOLD_OVER_CAP), as HTCondor holds a job over its output limit.
            report = site.conn.download(
                layout.spool, returned, progress=site.progress, exclude=FETCH_EXCLUDE,
                job_log=REMOTE_USERLOG_NAME,
            )  # fmt: skip
        except NoRoom as exc:  # the phase stays: sync tries again once there is room
            raise NoRoom(f"export {record.name}: {exc}; free space there and sync (or fetch) "
                         "again") from exc  # fmt: skip
        except ReturnRefused as exc:  # over a cap: a person decides; the phase stays
            raise ReturnRefused(f"{exc}; raise the cap and fetch again, or `condor_lumberjack "
                                f"unexport --discard {record.name}` hands the jobs back unrun"
                                ) from exc  # fmt: skip
        logs = site_logs.fetch(site.conn, layout.root, ledger.work_dir(record.name))
        crash_point("fetch.before-ledger")
        return {"stop": to_json(stopped), "logs": logs, "received_files": report.sent_files,
                "received_bytes": report.sent_bytes, "over_cap": report.over_cap,
                "skipped": [{"name": repr(path), "reason": why}
                            for path, why in report.bad_entries]}  # fmt: skip

    result = run_step(ledger, record.name, "fetch", act)
    ledger.update_info(record.name, over_cap=result["over_cap"])  # import holds them
    ledger.move(record.name, "fetch")
    return result


def returned_dir(ledger: Ledger, record: ExportRecord) -> Path:
    """Where the remote spool comes back: this account's own work dir for the export,
    0700, never the bundle (the job's owner could swap a directory there for a link)."""
    return importer.private_dir(ledger.work_dir(record.name) / RETURNED)


def import_results(
    ledger: Ledger, schedd: Any, record: ExportRecord, *, dry_run: bool = False
) -> dict[str, Any]:
    """Merge what came back into the local schedd (the foundation's import)."""
    check_phase(record, "import")
    returned = returned_dir(ledger, record)
    if schedd is None and not dry_run:
        raise ValueError("import needs the local schedd to merge the job ads into")
    reader = owner_of(record.owner) if record.owner else None
    how = {"work_dir": ledger.work_dir(record.name), "owner": record.owner,
           "bundle_reader": reader, "manifest_sha256": record.info.get("manifest_sha256"),
           "site": record.site, "over_cap": record.info.get("over_cap") or {}}  # fmt: skip

    def manifest() -> bundle_mod.ReadManifest:
        # As the owner, and no longer than export wrote it (bounded_read)
        size = record.info.get("manifest_bytes")
        return bundle_mod.read_manifest_once(record.bundle_dir, size, reader)

    if dry_run:
        return importer.run_import(
            None, record.bundle_dir, returned, dry_run=True, read=manifest(), **how
        ).to_json()

    def act() -> dict[str, Any]:
        # Jobs removed or held at home: the schedd's import merges neither; they come
        # home as the person left them (queue_commands.finish_at_home).
        removed, held = queue_commands.home_states(schedd, record)
        answer = importer.run_import(
            schedd, record.bundle_dir, returned, read=manifest(),
            removed_at_home=frozenset(removed), **how,
        ).to_json()  # fmt: skip
        crash_point("import.after-merge")
        queue_commands.finish_at_home(schedd, removed, held)
        return {**answer, "removed_at_home": removed, "held_at_home": held}

    report = run_step(ledger, record.name, "import", act)
    ledger.update_info(
        record.name,
        imported={key: report.get(key) for key in ("jobs", "completed", "handed_back_idle")},
    )
    ledger.move(record.name, "import")
    return report
