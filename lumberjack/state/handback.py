"""Giving an export up, whatever the site returned: its jobs back to the local schedd
as they left (`unexport --discard`) and its site directory and local bundle removed
(`cleanup`), from every phase the table in phases.py allows.

A job is under one schedd's control at a time: before jobs the site may still run go
back here, the export's remote pool is stopped. When the site cannot be reached to
stop it, handing back is refused unless a person forces it (`force`), and the answer
says what was left.
"""

from __future__ import annotations

import shutil
from typing import Any

from lumberjack.core.crashpoints import crash_point
from lumberjack.core.records import to_json
from lumberjack.errors import LoginNeeded, LumberjackError, RemoteError, SetupError
from lumberjack.state import queue_commands
from lumberjack.state.ledger import ExportRecord, Ledger
from lumberjack.state.phases import Phase
from lumberjack.state.steps import Site, check_phase, layout_of, run_step

#: Phases in which the export's remote pool may still run its jobs (fetch stops it
#: before anything comes back, so from fetched on it does not).
POOL_MAY_RUN = (Phase.LAUNCHED, Phase.RUNNING, Phase.FINISHED)


def discard_and_hand_back(
    ledger: Ledger, schedd: Any, record: ExportRecord, site: Site | None = None,
    *, force: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Step "unexport --discard": the jobs go back to the local schedd as they left it,
    nothing the site did is merged (jobs that finished there will run again). Where its
    pool may still run them, it is stopped first over `site`; `force` hands them back
    even when that fails, and the answer's "left" says what may still run."""
    check_phase(record, "unexport --discard")

    def act() -> dict[str, Any]:
        result: dict[str, Any] = {}
        if record.phase in POOL_MAY_RUN and record.site:
            result.update(_stop_pool(site, record, force))
        queue_commands.idle_again(schedd, record)  # sync showed them running
        result["jobs"] = schedd.unexport(record.clusters)
        return result

    result = run_step(ledger, record.name, "unexport --discard", act)
    if result.get("left"):
        ledger.update_info(record.name, left_at_site=result["left"])
    ledger.move(record.name, "unexport --discard", message="results discarded")
    return result


def _stop_pool(site: Site | None, record: ExportRecord, force: bool) -> dict[str, Any]:
    """Stop the export's remote pool (schedd, its pilots, the instance); idempotent."""
    from lumberjack.transport.carrier import LinkLost

    try:
        if site is None:
            raise RemoteError(f"no connection to site {record.site}")
        layout = layout_of(record)
        if not site.holds(layout):
            return {"stop": "nothing of the export at the site"}
        return {"stop": to_json(site.agent(layout, "stop"))}
    except (LumberjackError, LinkLost) as exc:
        reason = _first_line(exc)
        if force:
            return {"left": f"the remote pool at site {record.site} was not stopped ({reason}); "
                            "its jobs may still run there until its pilots end"}  # fmt: skip
        raise _unreachable(
            exc,
            f"{record.name}: cannot stop its remote pool at site {record.site} ({reason}), "
            "so its jobs may still run there; run this again once the site answers, or "
            "add --force to hand them back anyway (a job may then run there and here)",
        ) from exc


def cleanup(
    ledger: Ledger, site: Site | None, record: ExportRecord, *, site_only: bool = False,
    force: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Remove the site directory and the local bundle of an export whose jobs are the
    local schedd's again (imported, unexported, failed) or already cleaned (again: what
    an earlier cleanup had to leave at the site).

    `site_only` (step "cleanup --site", from fetched): only the site directory, with
    the pool's signing key and the pilots' token; the bundle stays, and with it the way
    home (import, or unexport --discard). The local bundle never goes while the local
    schedd still counts the jobs as exported: that is what the phase table ensures.
    `force`: a site that cannot be reached does not keep the bundle; the answer's
    "left" names the directory left at the site (the next cleanup tries it again).
    """
    step = "cleanup --site" if site_only else "cleanup"
    check_phase(record, step)

    def act() -> dict[str, Any]:
        result: dict[str, Any] = {}
        if site is not None and record.info.get("remote_dir"):
            result.update(_remove_at_site(site, record, force and not site_only))
        if not site_only:
            result.update(remove_local(ledger, record))
        crash_point("cleanup.before-ledger")
        return result

    result = run_step(ledger, record.name, step, act)
    if result.get("left") or record.info.get("left_at_site"):  # kept until one succeeds
        ledger.update_info(record.name, left_at_site=result.get("left"))
    ledger.move(record.name, step)
    return result


def remove_local(ledger: Ledger, record: ExportRecord) -> dict[str, Any]:
    """The local bundle (its contents as its owner) and this account's work dir."""
    from lumberjack.ap.export import remove_bundle

    shutil.rmtree(ledger.work_dir(record.name), ignore_errors=True)
    if not record.bundle_dir.exists():
        return {}
    remove_bundle(record.bundle_dir, record.owner)
    return {"local_removed": str(record.bundle_dir)}


def _remove_at_site(site: Site, record: ExportRecord, force: bool) -> dict[str, Any]:
    from lumberjack.transport.carrier import LinkLost

    layout = layout_of(record)
    result: dict[str, Any] = {}
    try:
        if site.holds(layout):
            result["stop"] = to_json(site.agent(layout, "stop"))
            crash_point("cleanup.after-stop")
            result["remote"] = to_json(site.agent(layout, "remove"))
            crash_point("cleanup.after-remote")
        else:
            result["remote"] = {"removed": False, "reason": "nothing at the site"}
    except (LumberjackError, LinkLost) as exc:
        reason = _first_line(exc)
        if not force:
            raise _unreachable(
                exc,
                f"{record.name}: cannot remove {layout.root} at site {record.site} "
                f"({reason}); run cleanup again once the site answers, or add --force to "
                "remove the local bundle and leave that directory",
            ) from exc
        result["left"] = f"{layout.root} at site {record.site} ({reason})"
    return result


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _unreachable(exc: BaseException, message: str) -> LumberjackError:
    """The refusal when the site did not answer: a login to renew, or a setup mistake,
    stays that kind."""
    if isinstance(exc, (LoginNeeded, SetupError)):
        return type(exc)(message)
    return RemoteError(message)
