"""The export step, for the ledger: record the export, let the local schedd export the
jobs, write the bundle (ap/export.py), and on any failure give the jobs back (`rollback`,
also what `sync` does for an export a crash left in phase "exporting")."""

from __future__ import annotations

from typing import Any

from lumberjack.ap import as_user
from lumberjack.ap import bundle as bundle_mod
from lumberjack.ap.bundle_home import make_bundle_dir
from lumberjack.ap.export import Plan, ProgressCallback, write_bundle_json
from lumberjack.ap.schedd import LocalSchedd
from lumberjack.core.crashpoints import crash_point
from lumberjack.errors import LumberjackError
from lumberjack.host.identity import owner_of
from lumberjack.state import queue_commands
from lumberjack.state.ledger import Ledger


def run_export(
    schedd: LocalSchedd,
    ledger: Ledger,
    plan: Plan,
    *,
    site: str | None,
    info: dict[str, Any] | None = None,
    progress: ProgressCallback | None = None,
) -> dict[str, int]:
    """Export for real: ledger first, then the schedd, then the bundle. The bundle's
    file count and bytes, and whether the schedd's answer came too late (its 20 s; the
    export was then read from the schedd's own state, schedd_wait.settle_export)."""
    with ledger.lock(plan.name):
        ledger.create(
            plan.name,
            site=site,
            bundle_dir=plan.bundle_dir,
            remote_spool=plan.remote_spool,
            owner=plan.owner,
            clusters=plan.clusters,
            jobs=plan.jobs,
            info=info,
        )
        native_dir = plan.bundle_dir / bundle_mod.NATIVE
        # Made, native/ too, where only root acts, and the owner's last (bundle_home).
        make_bundle_dir(plan.bundle_dir, plan.owner)
        ledger.move(plan.name, "export")
        try:
            crash_point("export.before-schedd")
            result = schedd.export_jobs(
                plan.clusters, native_dir, plan.remote_spool, expected=plan.jobs,
                reader=owner_of(plan.owner),
            )  # fmt: skip
            crash_point("export.after-schedd")
            if result.settled:
                ledger.step(plan.name, "export", "settled", SETTLED)
            if result.total_job_ads != len(plan.jobs):
                raise LumberjackError(
                    f"the schedd exported {result.total_job_ads} jobs, expected {len(plan.jobs)}; "
                    "rolled back"
                )
            # Written as the owner: its inputs are read, and the bundle made, as the owner.
            args = {"plan": plan.to_json(), "native_log": str(result.log),
                    "local_iwds": plan.local_iwds, "site": site,
                    "rewrites": plan.rewrites}  # fmt: skip
            written = as_user.call_as(plan.owner, write_bundle_json, args, progress)
            # Import refuses a manifest (and so a path map) changed after this point; ship
            # and import read no more of it than was written. The owner's child read it
            # back: root opens nothing in the owner's bundle by path.
            ledger.update_info(plan.name, manifest_sha256=written.pop("manifest_sha256"),
                               manifest_bytes=written.pop("manifest_bytes"))  # fmt: skip
            crash_point("export.after-manifest")
        except BaseException as exc:
            rollback(schedd, ledger, plan.name, plan.clusters, reason=str(exc))
            raise
        ledger.move(plan.name, "export")
        _edits_from_here(schedd, ledger, plan.name)
        # 1 when the schedd answered too late and the export was read from its state
        return {**written, "schedd_answered_late": int(result.settled)}


def _edits_from_here(schedd: LocalSchedd, ledger: Ledger, name: str) -> None:
    """Edits of the exported jobs count from now (queue_commands.remember_as_exported).
    A failure here costs only that: the first sync after launch takes the baseline."""
    try:
        queue_commands.remember_as_exported(ledger, schedd, ledger.get(name))
    except (LumberjackError, OSError):
        pass


SETTLED = (
    "the schedd answered the export after the bindings' 20 s; every job was found "
    "exported and the export log whole"
)


def rollback(
    schedd: LocalSchedd, ledger: Ledger, name: str, clusters: list[int], reason: str
) -> None:
    """Give the jobs back to the local schedd after a failed export; the unexport waits
    for a schedd still busy with the export (LocalSchedd.unexport)."""
    try:
        schedd.unexport(clusters)
    except LumberjackError as exc:
        if "No clusters to unexport" not in str(exc):
            ledger.step(name, "rollback", "failed", str(exc))
            raise
    ledger.move(name, "rollback", message=f"rolled back: {reason}")
