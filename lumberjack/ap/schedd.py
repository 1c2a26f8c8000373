"""The local schedd, through the htcondor2 bindings: query, export, import, unexport.

A thin adapter: every decision lives in the callers; this module only turns the
bindings' results and exceptions into lumberjack's own words.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lumberjack.ap import result_attrs
from lumberjack.ap.job_channels import CHANNEL_ATTRS
from lumberjack.ap.schedd_wait import (
    PATIENCE,
    Patience,
    may_have_acted,
    retry_while_busy,
    settle_export,
    settle_import,
)
from lumberjack.core.classad_text import quote_string, site_text
from lumberjack.core.contract import QUEUE_LOG
from lumberjack.core.message_text import one_line
from lumberjack.errors import BadInput, LumberjackError, SetupError
from lumberjack.host.identity import Owner

# Attributes the selection, preflight and path map need from each job: every one the
# path map reads (export.PATH_MAP_ATTRS), so that the plan refuses what the bundle would.
JOB_PROJECTION = list(dict.fromkeys([
    "ClusterId", "ProcId", "Owner", "User", "JobStatus", "JobUniverse", "Iwd", "Cmd",
    "Managed", "ManagedManager", "JobMaterializeDigestFile", "JobMaterializeLimit",
    "JobMaterializeMaxIdle", "TransferExecutable", "TransferInput", "TransferOutput",
    "TransferOutputRemaps", "In", "Out", "Err", "UserLog", "x509userproxy",
    "ContainerImage", "OutputDestination", "RequestRuntime", "MaxRuntime",
    "JobDurationLimit", "AllowedJobDuration", "RequestCpus", "RequestMemory",
    "RequestDisk", "RequestGPUs", "JobBatchName", "QDate", "ShouldTransferFiles",
    "SingularityImage", "ContainerImageFullPath", "TransferContainer", "DAGManNodesLog",
    "DAGManNodesMask",
    "TransferPlugins", "PreserveRelativePaths", *CHANNEL_ATTRS,
]))  # fmt: skip


@dataclass(frozen=True)
class ExportResult:
    total_job_ads: int
    total_cluster_ads: int
    log: Path
    #: the schedd's answer came too late, and the export was read from its state
    settled: bool = False


def _htcondor() -> Any:
    # Imported late: unit tests and `inspect` must work without touching a schedd.
    _check_condor_config()
    import htcondor2

    return htcondor2


def _check_condor_config() -> None:
    """A CONDOR_CONFIG naming no file, in one line: the bindings would print HTCondor's
    paragraph about it on each load, then fail without naming it. (ONLY_ENV and a
    command, `...|`, are HTCondor's other spellings; they are left to it.)"""
    path = os.environ.get("CONDOR_CONFIG", "")
    if path and path != "ONLY_ENV" and not path.rstrip().endswith("|") and not os.path.exists(path):
        raise SetupError(
            f"CONDOR_CONFIG names {path}, which does not exist: point it at the access "
            "point's HTCondor configuration (or unset it for the default)"
        )


def _config_in_use() -> str:
    path = os.environ.get("CONDOR_CONFIG")
    if path:
        return f"CONDOR_CONFIG={path}"
    return "the default configuration (CONDOR_CONFIG is not set)"


def _unreachable(exc: BaseException, schedd_host: str | None) -> LumberjackError:
    where = f"the schedd {schedd_host} (SCHEDD_HOST)" if schedd_host else "the local schedd"
    return LumberjackError(
        f"cannot reach {where}: {_one_line(exc).rstrip('.')}; is condor_schedd running "
        f"(`condor_status -schedd` lists the schedds)? HTCondor reads {_config_in_use()}"
    )


def condor_version() -> str:
    return str(_htcondor().version())


class LocalSchedd:
    """The access point's schedd (SCHEDD_HOST when set, else the local one)."""

    def __init__(self) -> None:
        htcondor = _htcondor()
        htcondor.reload_config()
        #: where the schedd is (None: the local one), for a child that acts as an owner
        self.location: Any = None
        #: how long to wait for a schedd that did not answer in time (schedd_wait)
        self.patience = PATIENCE
        name = htcondor.param.get("SCHEDD_HOST")
        try:
            if name:
                self.location = htcondor.Collector().locate(htcondor.DaemonType.Schedd, name)
                self._schedd = htcondor.Schedd(self.location)
            else:
                self._schedd = htcondor.Schedd()
        except Exception as exc:  # the bindings raise HTCondorException or ValueError
            raise _unreachable(exc, name) from exc

    def query(self, constraint: str, projection: Iterable[str] = JOB_PROJECTION) -> list[JobAd]:
        return ads_to_dicts(self.query_ads(constraint, projection))

    def query_ads(self, constraint: str, projection: Iterable[str]) -> list[Any]:
        """The jobs' ads as the bindings give them (classad2.ClassAd), for matchmaking."""
        try:
            return list(self._schedd.query(constraint=constraint, projection=list(projection)))
        except Exception as exc:
            raise BadInput(
                f"the schedd rejected constraint {constraint!r}: {_one_line(exc)}"
            ) from exc

    def history(
        self, constraint: str, projection: Iterable[str] = JOB_PROJECTION, limit: int = 10
    ) -> list[JobAd]:
        """Jobs that left the queue (completed, removed), newest first; [] when the schedd
        keeps no history or will not say."""
        try:
            ads = self._schedd.history(constraint, list(projection), match=limit)
        except Exception:  # a question asked only to explain an empty selection
            return []
        return ads_to_dicts(ads)

    def export_jobs(
        self,
        clusters: list[int],
        export_dir: Path,
        new_spool: str,
        expected: Collection[str] = (),
        reader: Owner | None = None,
    ) -> ExportResult:
        """The schedd's export of `clusters` into `export_dir`. When its answer does not
        come in time (20 s, a big export) the outcome is read from the schedd's state
        (schedd_wait.settle_export, for the jobs `expected`, "C.P"): a whole export is a
        success, anything else a LumberjackError (the caller rolls back); the log is then
        read as `reader` (the owner, whose directory it is)."""
        spec = [str(c) for c in clusters]
        log = export_dir / QUEUE_LOG
        try:
            result = self._schedd.export_jobs(spec, str(export_dir), new_spool)
        except Exception as exc:
            if not (expected and may_have_acted(str(exc))):
                raise LumberjackError(f"the schedd refused to export: {_one_line(exc)}") from exc
            try:
                look = settle_export(
                    self._schedd.query, clusters, expected, log, self.patience, reader
                )
            except LumberjackError as why:
                raise LumberjackError(
                    f"the schedd did not answer the export in time ({_one_line(exc)}), "
                    f"and then {why}"
                ) from exc
            return ExportResult(look.procs, look.clusters, log, settled=True)
        _check_action(result, "export")
        return ExportResult(
            int(result.get("TotalJobAds", 0)),
            int(result.get("TotalClusterAds", 0)),
            log,
        )

    def import_results(self, import_dir: Path, wake: str | None = None) -> int:
        return _import_into(self._schedd, str(import_dir), wake)

    def spool(self) -> str:
        """The schedd's SPOOL, where its jobs' spool directories are: from the running
        schedd's own configuration when SCHEDD_HOST names it, else from this machine's.
        LumberjackError when it will not say, or keeps job spools elsewhere
        (ALTERNATE_JOB_SPOOL, an expression of each job's ad)."""
        htcondor = _htcondor()
        try:
            if self.location is not None:
                config: Any = htcondor.RemoteParam(self.location)
            else:
                config = htcondor.param
            spool, alternate = config.get("SPOOL"), config.get("ALTERNATE_JOB_SPOOL")
        except Exception as exc:
            raise LumberjackError(f"cannot read the schedd's SPOOL: {_one_line(exc)}") from exc
        if alternate:
            raise LumberjackError("the schedd keeps job spools by ALTERNATE_JOB_SPOOL")
        if not spool or not str(spool).startswith("/"):
            raise LumberjackError(f"the schedd's SPOOL is not an absolute path: {spool!r}")
        return str(spool)

    def hold(self, job_ids: list[str], reason: str) -> None:
        """Hold jobs ("C.P") with `reason`, as condor_hold -reason does: what cron finds
        it cannot send anywhere, shown where the user looks (condor_q -hold)."""
        htcondor = _htcondor()
        # One line, bounded, a literal: a reason may quote what a job or the site said.
        reason = site_text(reason, result_attrs.TEXT)
        try:
            self._schedd.act(htcondor.JobAction.Hold, job_ids, reason=reason)
            # The bindings (25.14) leave HoldReason empty whatever `reason` says.
            self._schedd.edit(job_ids, "HoldReason", quote_string(reason))
        except Exception as exc:
            raise LumberjackError(
                f"the schedd refused to hold {job_ids}: {_one_line(exc)}"
            ) from exc

    def edit(self, job_ids: list[str], name: str, text: str) -> None:
        """Set attribute `name` of jobs ("C.P") to the expression `text`."""
        try:
            self._schedd.edit(job_ids, name, text)
        except Exception as exc:
            raise LumberjackError(
                f"the schedd refused to set {name} of {len(job_ids)} job(s): {_one_line(exc)}"
            ) from exc

    def remove_x(self, job_ids: list[str]) -> None:
        """condor_rm -forcex: jobs already removed (X) leave the queue for the history,
        with the aborted event the schedd writes in their user log."""
        htcondor = _htcondor()
        try:
            self._schedd.act(htcondor.JobAction.RemoveX, job_ids)
        except Exception as exc:
            raise LumberjackError(
                f"the schedd refused to remove {job_ids}: {_one_line(exc)}"
            ) from exc

    def unexport(self, clusters: list[int]) -> int:
        """The schedd's unexport of `clusters`, asked again while the schedd is busy (a
        big export it still works on answers nothing else; schedd_wait.schedd_busy)."""
        spec = [str(c) for c in clusters]
        try:
            result = retry_while_busy(lambda: self._schedd.unexport_jobs(spec), self.patience)
        except Exception as exc:
            raise LumberjackError(f"the schedd refused to unexport: {_one_line(exc)}") from exc
        _check_action(result, "unexport")
        return int(result.get("TotalJobAds", 0))


def import_as_owner(
    location: Any, import_dir: str, wake: str | None = None, progress: Any = None
) -> int:
    """The schedd's import, from a child that became the job's owner (as_user.call_as):
    the schedd opens the queue as the user it authenticates, and refuses root.

    The owner proves who it is by FS, the local method an access point's schedd accepts;
    the config is read again so that no security session of the parent's identity is
    reused. `location` (LocalSchedd.location) was found by the parent: the child asks
    no collector. ``wake``: see _import_into.
    """
    htcondor = _htcondor()
    os.environ["_CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS"] = "FS"
    htcondor.reload_config()
    try:
        schedd = htcondor.Schedd(location) if location is not None else htcondor.Schedd()
    except Exception as exc:
        raise _unreachable(exc, None) from exc
    return _import_into(schedd, import_dir, wake)


def _import_into(
    schedd: Any, import_dir: str, wake: str | None = None, patience: Patience = PATIENCE
) -> int:
    """The schedd's import (an answer too late is settled from the queue:
    schedd_wait.settle_import); then, with ``wake`` (a job handed back idle), the schedd is
    told that it has jobs to run (_wake)."""

    def attempt() -> Any:
        try:
            return schedd.import_exported_job_results(import_dir)
        except Exception as exc:
            if may_have_acted(str(exc)):
                return exc  # sent, but answered too late: settled below
            raise

    try:
        # A schedd busy with another import does not take the command: asked again.
        result = retry_while_busy(attempt, patience)
    except Exception as exc:
        raise LumberjackError(f"the schedd refused the import: {_one_line(exc)}") from exc
    if isinstance(result, Exception):
        exc = result
        # Too late an answer (20 s): the schedd may have merged; its queue says.
        try:
            jobs = settle_import(schedd.query, Path(import_dir), patience)
        except LumberjackError as why:
            raise LumberjackError(
                f"the schedd did not answer the import in time ({_one_line(exc)}), and then {why}"
            ) from exc
        result = {"ActionResult": 1, "TotalJobAds": jobs}
    _check_action(result, "import")
    if wake:
        _wake(schedd, wake)
    return int(result.get("TotalJobAds", 0))


def _wake(schedd: Any, job_id: str) -> None:
    """The schedd offers the negotiator only the jobs of its list of runnable jobs, which
    it builds again when something says so (a submit, a job set idle, a priority set) or
    else every 20 minutes (qmgmt.cpp, PrioRecRebuildMaxInterval); the jobs an import hands
    back idle say nothing (no attribute the import changes does). Setting one such job's
    JobPrio to the value it has (what condor_prio does, changing nothing) makes the
    schedd build it again, with every job the import handed back, and a reschedule asks
    the negotiator for a cycle."""
    cluster, proc = (int(n) for n in job_id.split("."))
    this = f"ClusterId == {cluster} && ProcId == {proc} && JobStatus == 1"
    try:
        ads = schedd.query(this, ["JobPrio"])
        prio = ads[0].get("JobPrio") if ads else None
        if isinstance(prio, int):
            schedd.edit(f"{this} && JobPrio == {prio}", "JobPrio", str(prio))
            schedd.reschedule()
    except Exception:  # the jobs are home; without this the schedd lists them later
        pass


class JobAd(dict):
    """A job ad as plain Python values, plus `texts`: each attribute's expression text
    exactly as job_queue.log would hold it (what the path map works on)."""

    texts: dict[str, str]


def ads_to_dicts(ads: Iterable[Any]) -> list[JobAd]:
    """ad_to_dict of each ad, every string the same in two ads held once: the names, and
    the values a cluster's jobs share (a query of 100,000 jobs otherwise holds each
    name and each shared path 200,000 times)."""
    shared: dict[str, str] = {}
    return [ad_to_dict(ad, shared) for ad in ads]


def ad_to_dict(ad: Any, shared: dict[str, str] | None = None) -> JobAd:
    """A job ad as plain Python: literals evaluated, expressions kept as their text.
    `shared`: strings already made, reused for an equal one (see ads_to_dicts)."""
    import classad2

    share = (shared if shared is not None else {}).setdefault
    out = JobAd()
    out.texts = old_syntax_texts(ad, share)
    for key in ad.keys():
        value = ad.get(key)
        if isinstance(value, classad2.ExprTree):
            value = str(value)
        if isinstance(value, str):
            value = share(value, value)
        out[share(key, key)] = value
    return out


def old_syntax_texts(ad: Any, share: Callable[[str, str], str] | None = None) -> dict[str, str]:
    """Each attribute's expression text in the OLD ClassAd syntax, as job_queue.log holds
    it (lumberjack.core.classad_text reads that syntax). `str(ad.lookup(k))` would give
    the NEW syntax: backslashes doubled, non-ASCII as octal escapes, so a path planned
    from it would not be the path the schedd's log holds. `share`: see ad_to_dict."""
    keep = share or (lambda text, _: text)
    texts = {}
    for line in ad.printOld().splitlines():
        name, sep, text = line.partition(" = ")
        if sep:
            texts[keep(name, name)] = keep(text, text)
    return texts


def _check_action(result: Any, what: str) -> None:
    if result is None:
        raise LumberjackError(f"the schedd gave no answer to {what}")
    if int(result.get("ActionResult", 0)) != 1:
        reason = result.get("ErrorString") or "no reason given"
        raise LumberjackError(f"the schedd's {what} failed: {reason}")


def _one_line(exc: BaseException) -> str:
    return one_line(str(exc), type(exc).__name__)
