"""An export's life at a site, one idempotent step per phase.

    exported --ship--> shipped --launch--> launched --(status: a job runs)--> running
    --(status: all done)--> finished --fetch--> fetched --import--> imported
    --cleanup--> cleaned

(every move, and which of them `sync` takes, is in the table in phases.py).

Each step is recorded in the ledger before and after it acts (`steps`), runs under the
export's lock, and can be repeated: shipping again moves only what is missing, launching
again only submits pilots when idle jobs are left and none is queued or running,
fetching again re-verifies what came back. `advance` takes an export as far as it can
go without waiting, which is what `sync` (cron) and `run --wait` do.

Every command opens at most one SSH connection per site (`Site`), on first use; `sync`
serves every export of a site over that one connection.
"""

from __future__ import annotations

import json
import os
import posixpath
import shlex
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable

from lumberjack.ap import bundle as bundle_mod
from lumberjack.ap import importer
from lumberjack.ap.agent_zipapp import build_agent
from lumberjack.ap.identity import acting_as, owner_of
from lumberjack.core import crashpoints
from lumberjack.core.crashpoints import crash_point
from lumberjack.core.manifest import FileEntry
from lumberjack.errors import BadInput, Busy, LumberjackError, RemoteError
from lumberjack.profiles.request import ResourceRequest, pilot_spec
from lumberjack.profiles.sites import SiteProfile, find_profile
from lumberjack.site.remote_pool import ExportLayout, lease_dir_name
from lumberjack.site.runtime import release_names
from lumberjack.state import phases
from lumberjack.state.isolation_guard import check_isolation
from lumberjack.state.ledger import ExportRecord, Ledger
from lumberjack.state.phases import Phase
from lumberjack.transport.transfer import open_plain

if TYPE_CHECKING:
    from lumberjack.transport import Progress

RETURNED = "returned"  # the remote spool as fetched, in this account's work dir
#: What comes back from the site's spool: the queue and each job's directory; not the
#: inputs (the access point has them) nor the schedd's own bookkeeping.
FETCH_EXCLUDE = (
    "lumberjack-inputs/*", "local_univ_execute/*", ".schedd_*", "*.lock", "Accountant*",
    "spool_version", "schedd_daemon_history*", ".job_queue.log.*",
)  # fmt: skip
#: How long a pilot token stays valid beyond the walltime (not days: a token taken from a
#: node is worth little for long); a pilot still queued gets a fresh one (site/pilot_token).
PILOT_TOKEN_MARGIN_S = 15 * 60
#: Container runtimes the site agent can run the pool and the pilots with (podman-hpc:
#: its commands are rendered from NERSC's documentation, see site/runtime.py).
SUPPORTED_RUNTIMES = ("apptainer", "singularity", "podman-hpc", "none")
#: How many times `sync` submits pilots for an export before it asks a person.
MAX_PILOT_ROUNDS = 10


class Site:
    """The site of one command: its profile and (opened on first use) one connection.

    `hold`: the command may hold a connection of its own that asks a person once (at an
    MFA site that allows no connection sharing); cron's `sync` may not. A connection
    that could not be opened is not tried again by the same command: its error repeats.
    """

    def __init__(
        self, profile: SiteProfile, *, progress: Progress | None = None, hold: bool = True
    ) -> None:
        self.profile = profile
        self.progress = progress
        self.hold = hold
        self._conn: Any = None
        self._failed: LumberjackError | None = None
        #: export directory -> the agent's status answer, asked for many at once by
        #: `sync` (`prefetch_status`); each is used once, by `refresh_status`.
        self.statuses: dict[str, dict[str, Any]] = {}

    @property
    def conn(self) -> Any:
        if self._failed is not None:
            raise self._failed
        if self._conn is None:
            from lumberjack.transport import SiteConnection

            try:
                conn = SiteConnection(self.profile, hold=self.hold)
                conn.open()
            except LumberjackError as exc:
                self._failed = exc
                raise
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Site:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def export_dir(self, name: str) -> str:
        """The export's directory at the site (base_dir's variables expanded there)."""
        return posixpath.join(self.conn.expand(self.profile.base_dir), name)

    def lease_dir(self, name: str) -> str:
        """Lease `name`'s directory at the site, beside the exports' (`export` and `lease
        create` both refuse a directory that exists, so the two never meet)."""
        return self.export_dir(lease_dir_name(name))

    def agent(self, layout: ExportLayout, command: str) -> dict[str, Any]:
        """Run the site agent; its JSON answer, or RemoteError with its one-line reason."""
        line = f"python3 {shlex.quote(layout.agent)} {command} {shlex.quote(layout.root)}"
        point = crashpoints.armed()
        if point:  # the agent's own crash points (tests): the same variable, over SSH
            line = f"{crashpoints.ENV}={shlex.quote(point)} {line}"
        result = self.conn.run(line, check=False)
        try:
            answer = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise RemoteError(f"site agent {command} failed: {detail}") from None
        if "error" in answer:
            raise RemoteError(f"site agent {command}: {answer['error']}")
        return answer

    def prefetch_status(self, layouts: list[ExportLayout]) -> None:
        """The status of several exports in one call of the site agent (one process at
        the site instead of one per export), kept in `statuses`. The agent shipped with
        the first export answers for all (they are the same account's, below the same
        base_dir); an agent too old to take several directories answers nothing here,
        and each export is then asked on its own, as is any the call did not answer."""
        if len(layouts) < 2:
            return
        roots = [layout.root for layout in layouts]
        line = shlex.join(["python3", layouts[0].agent, "status", *roots])
        try:
            result = self.conn.run(line, check=False)
            answer = json.loads(result.stdout.strip().splitlines()[-1])["status"]
        except (LumberjackError, ValueError, IndexError, KeyError, TypeError):
            return
        if isinstance(answer, dict):
            self.statuses.update(
                (root, answer[root])
                for root in roots
                if isinstance(answer.get(root), dict) and "error" not in answer[root]
            )


def site_for(record: ExportRecord, *, progress: Progress | None = None, hold: bool = True) -> Site:
    if not record.site:
        raise BadInput(f"export {record.name!r} is an offline bundle (no site); use import --in")
    return Site(find_profile(record.site), progress=progress, hold=hold)


def layout_of(record: ExportRecord) -> ExportLayout:
    remote_dir = record.info.get("remote_dir")
    if not remote_dir:
        raise BadInput(f"export {record.name!r} has no site directory recorded")
    return ExportLayout(remote_dir)


def check_phase(record: ExportRecord, step: str) -> None:
    """BadInput (nothing changed) when the table has no `step` from the export's phase."""
    phases.check(record.phase, step, record.name)


def _step(ledger: Ledger, name: str, step: str, action: Callable[[], dict]) -> dict:
    ledger.step(name, step, "started")
    try:
        result = action()
    except Exception as exc:
        ledger.step(name, step, "failed", str(exc))
        raise
    ledger.step(name, step, "done", json.dumps(result, default=str)[:2000])
    return result


# ---- the steps -----------------------------------------------------------------------


def ship(ledger: Ledger, site: Site, record: ExportRecord) -> dict[str, Any]:
    """Bundle and agent to the site; only missing or changed files move; verified."""
    check_phase(record, "ship")
    if record.phase == Phase.EXPORTED:  # inputs must not land beside another owner's jobs
        check_isolation(ledger, record, site.profile, record.info.get("shared_account", False))
    layout = layout_of(record)

    # The bundle is the owner's: root reads it only as the owner (a file swapped for a
    # link to a root-only file is then unreadable, never sent), and the manifest only as
    # the ledger recorded it.
    owner = owner_of(record.owner) if record.owner else None

    def open_source(path: Path) -> BinaryIO:
        with acting_as(owner):
            return open_plain(path)

    def act() -> dict[str, Any]:
        with acting_as(owner):
            read = bundle_mod.read_manifest_once(record.bundle_dir)
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
        conn.put_bytes(build_agent(), layout.agent, 0o700)
        release = ship_condor_release(site, layout)
        crash_point("ship.before-ledger")
        result = {"sent_files": report.sent_files, "sent_bytes": report.sent_bytes,
                  "skipped_files": report.skipped_files}  # fmt: skip
        if release is not None:
            result["condor_release"] = release
        return result

    result = _step(ledger, record.name, "ship", act)
    ledger.move(record.name, "ship")
    return result


def condor_release(profile: SiteProfile, layout: ExportLayout) -> dict[str, str] | None:
    """Runtime "none": the profile's HTCondor tarball (path on this machine, sha256) and
    where it goes at the site: one copy per site, under <base_dir>/htcondor/ (base_dir
    as the site expanded it: the export directory's parent)."""
    local = profile.condor_tarball_path()
    if local is None:
        return None
    sha256 = bundle_mod.sha256_file(local)
    tarball, directory = release_names(posixpath.dirname(layout.root), sha256)
    return {"local": str(local), "sha256": sha256, "tarball": tarball, "dir": directory}


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
    with tempfile.TemporaryDirectory() as staging:
        # The transfer sends files by their path below a root: the site's name, here.
        os.symlink(local, os.path.join(staging, name))
        report = site.conn.upload(Path(staging), posixpath.dirname(release["tarball"]), [entry])
    return {"tarball": release["tarball"], "sent_bytes": report.sent_bytes}


def launch_plan(record: ExportRecord, profile: SiteProfile, layout: ExportLayout) -> dict:
    """launch.json: what the agent needs to start the pool and the pilots. A joined
    export's names its lease's directory (bound into its container: the schedd reads
    the lease's signing key there); its pilots are the lease's."""
    plan = pool_plan(request_of(record.info), profile, layout, f"lj-{record.name}")
    lease_dir = record.info.get("lease_dir")
    if lease_dir:
        plan["lease"] = lease_dir
        plan["binds"] = [*plan["binds"], lease_dir]
    return plan


def request_of(info: dict[str, Any]) -> ResourceRequest:
    """The resource request an export's (or lease's) info holds (see request_info)."""
    data = dict(info["request"])
    data["origins"] = tuple(tuple(pair) for pair in data.get("origins", ()))
    return ResourceRequest(**data)


def pool_plan(
    request: ResourceRequest, profile: SiteProfile, layout: ExportLayout, name: str
) -> dict:
    """The plan of a remote pool and its pilots (an export's, or a lease's)."""
    check_runtime(profile)
    check_pilots(request, profile)
    spec = pilot_spec(
        request,
        profile,
        name=name[:63],
        node_command=layout.node_script,
        retire_command="true",
        output_dir=posixpath.join(layout.pilots, "out"),
    )
    release = condor_release(profile, layout)
    queue = profile.queue(request.queue)
    return {
        "runtime": profile.container.runtime,
        "image": profile.container.image,
        "binds": list(profile.container.bind),
        "condor_release": (
            {key: release[key] for key in ("sha256", "tarball", "dir")} if release else None
        ),
        "batch_system": profile.batch_system,
        "pilots": request.pilots,
        "spec": asdict(spec),
        "address": profile.schedd.address,
        "port": profile.schedd.port,
        "token_lifetime_s": request.walltime_s + PILOT_TOKEN_MARGIN_S,
        "idle_shutdown_s": request.idle_shutdown_s,
        "max_running_jobs": profile.schedd.max_running_jobs,
        "placement": profile.schedd.placement,
        "gpus": {
            "vendor": queue.gpu_vendor,
            "model": queue.gpu_model,
            "simulate": queue.simulate_gpus,
        },
    }


def check_runtime(profile: SiteProfile) -> None:
    """BadInput, in one line, for a container runtime the agent cannot use: better than
    a launch that fails obscurely at the site."""
    runtime = profile.container.runtime
    if runtime not in SUPPORTED_RUNTIMES:
        raise BadInput(
            f"runtime {runtime} is not supported; site {profile.name} needs one of "
            f"{', '.join(SUPPORTED_RUNTIMES)} ([container] runtime in its profile)"
        )
    if runtime == "none" and profile.container.condor_tarball is None:
        raise BadInput(
            f'site {profile.name} runs HTCondor without a container (runtime "none") but '
            "names no [container] condor_tarball to ship; add one to its profile"
        )
    if runtime != "none" and not profile.container.image:
        raise BadInput(f"site {profile.name} names no [container] image for {runtime}")
    profile.condor_tarball_path()  # BadInput if set and missing


def check_pilots(request: ResourceRequest, profile: SiteProfile) -> None:
    """With the schedd inside the allocation the first pilot holds the queue: two pilots
    at once would run two schedds on one queue (a job could run twice), so more nodes
    go into the one pilot instead."""
    if request.pilots > 1 and profile.schedd.placement == "allocation":
        raise BadInput(
            f"--pilots {request.pilots}: site {profile.name} runs the schedd inside the "
            'allocation ([schedd] placement = "allocation"), where one pilot at a time '
            "holds the queue; export again with --pilots 1 (--nodes sets its size)"
        )


def launch(ledger: Ledger, site: Site, record: ExportRecord) -> dict[str, Any]:
    """Start the remote pool on the shipped queue and submit the pilots."""
    check_phase(record, "launch")
    check_runtime(site.profile)
    if record.phase == Phase.SHIPPED:  # a first launch; later rounds were allowed then
        check_isolation(ledger, record, site.profile, record.info.get("shared_account", False))
    layout = layout_of(record)

    def act() -> dict[str, Any]:
        plan = launch_plan(record, site.profile, layout)
        site.conn.put_bytes(json.dumps(plan).encode(), posixpath.join(layout.root, "launch.json"),
                            0o600)  # fmt: skip
        crash_point("launch.after-plan")
        answer = site.agent(layout, "launch")
        crash_point("launch.before-ledger")
        return answer

    result = _step(ledger, record.name, "launch", act)
    ledger.move(record.name, "launch")
    return result


def refresh_status(ledger: Ledger, site: Site, record: ExportRecord) -> dict[str, Any]:
    """Jobs by status and pilots, from the site, and the phase they mean recorded in the
    ledger: running once a job left idle there, finished when every job is done."""
    check_phase(record, "status")
    layout = layout_of(record)
    answer = site.statuses.pop(layout.root, None) or site.agent(layout, "status")
    phase = ledger.get(record.name).phase  # now, not when the command started
    ledger.move(record.name, "status", status_phase(phase, answer))
    return answer


def status_phase(phase: Phase, answer: dict[str, Any]) -> Phase:
    """The phase a status answer from the site means for an export in `phase`."""
    possible = phases.ends("status", phase)
    if answer.get("finished") and Phase.FINISHED in possible:
        return Phase.FINISHED
    started = any(count for state, count in answer.get("jobs", {}).items() if state != "idle")
    if started and Phase.RUNNING in possible:
        return Phase.RUNNING
    return phase


def fetch(ledger: Ledger, site: Site, record: ExportRecord) -> dict[str, Any]:
    """Stop the remote pool (its queue final), bring the spool back, verified.

    Jobs that had not finished come back too: import hands them to the local schedd as
    idle, so none is lost and none runs twice.
    """
    check_phase(record, "fetch")
    layout = layout_of(record)

    def act() -> dict[str, Any]:
        from lumberjack.transport.transfer import ReturnRefused  # loaded with the link

        stopped = site.agent(layout, "stop")
        returned = returned_dir(ledger, record)
        crash_point("fetch.after-stop")
        if crashpoints.armed() == "fetch.mid-download":  # the outputs, not yet the queue
            site.conn.download(layout.spool, returned,
                               exclude=(*FETCH_EXCLUDE, "job_queue.log"))  # fmt: skip
            crash_point("fetch.mid-download")
        try:
            report = site.conn.download(layout.spool, returned,
                                        progress=site.progress, exclude=FETCH_EXCLUDE)  # fmt: skip
        except ReturnRefused as exc:  # over a cap: a person decides; the phase stays
            raise ReturnRefused(f"{exc}; raise the cap and fetch again, or `condor_lumberjack "
                                f"unexport --discard {record.name}` hands the jobs back unrun"
                                ) from exc  # fmt: skip
        crash_point("fetch.before-ledger")
        return {"stop": stopped, "received_files": report.sent_files,
                "received_bytes": report.sent_bytes,
                "skipped": [{"name": repr(path), "reason": why}
                            for path, why in report.bad_entries]}  # fmt: skip

    result = _step(ledger, record.name, "fetch", act)
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
    how = {"work_dir": ledger.work_dir(record.name), "owner": record.owner,
           "bundle_reader": owner_of(record.owner) if record.owner else None,
           "manifest_sha256": record.info.get("manifest_sha256")}  # fmt: skip
    if dry_run:
        return importer.run_import(None, record.bundle_dir, returned, dry_run=True, **how).to_json()

    def act() -> dict[str, Any]:
        answer = importer.run_import(schedd, record.bundle_dir, returned, **how).to_json()
        crash_point("import.after-merge")
        return answer

    report = _step(ledger, record.name, "import", act)
    ledger.update_info(
        record.name,
        imported={key: report.get(key) for key in ("jobs", "completed", "handed_back_idle")},
    )
    ledger.move(record.name, "import")
    return report


# ---- advancing -----------------------------------------------------------------------


def advance(ledger: Ledger, site: Site, schedd: Any, name: str) -> list[str]:
    """Take one export as far as it goes now without waiting, by the steps the phase
    table marks for sync; the phases it stepped from (and "launch" for new pilots)."""
    done: list[str] = []
    while True:
        record = ledger.get(name)
        step = phases.sync_step(record.phase)
        if step == "status":
            answer = refresh_status(ledger, site, record)
            if answer.get("finished"):
                continue
            if not _pilots_alive(answer) and answer["jobs"].get("idle"):
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


def _pilots_alive(answer: dict[str, Any]) -> bool:
    return any(state in ("queued", "running", "finishing") for state in answer["pilots"].values())


def request_info(request: ResourceRequest) -> dict[str, Any]:
    data = asdict(request)
    data["origins"] = [list(pair) for pair in request.origins]
    return data


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
            from lumberjack.state import leases

            if schedd is None:
                schedd = _LocalScheddOnFirstUse()
            results += leases.export_opted_in(ledger, schedd, sites)
        results += _sync(ledger, names, dry_run, schedd, open_site, sites)
        if whole and ledger.leases():  # after the exports: they may still need a lease
            from lumberjack.state import leases

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
        try:
            with ledger.lock(record.name):
                if schedd is None:
                    schedd = _LocalScheddOnFirstUse()
                current = ledger.get(record.name)
                if phases.sync_step(current.phase) == "rollback":
                    entry["steps"] = [recover_exporting(ledger, schedd, current)]
                elif current.site:
                    if current.site not in sites:
                        sites[current.site] = open_site(current)
                    entry["steps"] = advance(ledger, sites[current.site], schedd, record.name)
        except Busy:
            entry["steps"] = ["busy: skipped"]
        except LumberjackError as exc:
            entry["error"] = str(exc)
            entry["exit_code"] = exc.exit_code
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
    """The local schedd, reached only when a step needs it: any site export may get as
    far as import in one sync, but most syncs only look at the site."""

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
    from lumberjack.ap.export import remove_bundle, rollback

    rollback(schedd, ledger, record.name, record.clusters, reason="recovered by sync after a crash")
    remove_bundle(record.bundle_dir, record.owner)
    return "recovered: jobs handed back to the local schedd"
