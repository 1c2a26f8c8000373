"""The import-side plan: where each file that came back from the site goes.

Input: one job's record from the path map (``JobPaths``, written at export from the
user's ORIGINAL submit), the list of files found in the job's remote Iwd in the fetched
bundle, and the TransferOutput text. Output: ``Placement(source, dest, kind)`` entries;
this module never touches the disk (the caller copies, refusing symlinks and
non-regular files).

Rules, in order:

- ``_condor_stdout`` -> the original Out (kind "stdout"), ``_condor_stderr`` -> Err
  ("stderr"); nothing for /dev/null or an unset Out/Err; when Out and Err were the same
  file, ``_condor_stdout`` holds both and there is no stderr placement.
- ``lumberjack-user.log`` -> the original UserLog and DAGManNodesLog (kind "userlog"):
  the caller APPENDS the events in it to those logs, never overwrites them.
- TransferOutput set: only those entries come back. Without preserve_relative_paths
  HTCondor puts an entry into the Iwd under its basename, so the entry's basename is
  looked up (a directory entry brings everything under that name); with
  preserve_relative_paths the relative path is kept. A trailing ``/`` on an output
  directory ("contents only") is treated like the directory itself (a known
  simplification). Entries that did not come back are skipped.
- TransferOutput unset: every file in the remote Iwd except those ``is_schedd_file``
  names (listed below), lumberjack's own (``lumberjack-*``) and the names the job's inputs
  take in the sandbox (HTCondor only sends back new or changed files; an input the job
  changed is not written over the user's original).
- Every output goes through the original TransferOutputRemaps (``remap_name``: by
  source name, chains, parent directories); a relative destination is relative to the
  local Iwd, an absolute one stays.

Safety: every name from the site must pass ``check_safe_relative`` (no ``..``, not
absolute, no NUL, already normalised), and every destination, after normpath, must lie
inside one of the job's original directories (``allowed_roots``): the local Iwd, the
directories of Out, Err, UserLog and DAGManNodesLog, and the directories of every remap
destination in the original submit. Two different files with one destination are refused.

Names the schedd or starter write in the Iwd, never outputs when TransferOutput is unset:
``SCHEDD_FILES`` (.job.ad, .machine.ad, .update.ad, .chirp.config, _condor_creds,
condor_exec.exe, .job_wrapper_failure, docker_stderror) and anything starting with one of
``SCHEDD_PREFIXES`` (_condor_, .condor_, .docker_, .update.ad).
"""

from __future__ import annotations

import posixpath
from typing import NamedTuple, Optional

from lumberjack.ap.file_lists import remap_name, split_file_list
from lumberjack.ap.job_paths import JobPaths
from lumberjack.ap.path_text import normpath, relative_to, resolve
from lumberjack.ap.remote_layout import (
    DEVNULL,
    REMOTE_STDERR,
    REMOTE_STDOUT,
    REMOTE_USERLOG_NAME,
    RESERVED_PREFIX,
)
from lumberjack.core.classad_text import is_undefined, unquote_string
from lumberjack.core.message_text import shown
from lumberjack.core.safepath import why_unsafe
from lumberjack.errors import BadInput

KINDS = ("stdout", "stderr", "output", "userlog")

SCHEDD_FILES = frozenset(
    {
        ".job.ad",
        ".machine.ad",
        ".update.ad",
        ".chirp.config",
        "_condor_creds",
        "condor_exec.exe",
        ".job_wrapper_failure",
        "docker_stderror",
    }
)
SCHEDD_PREFIXES = ("_condor_", ".condor_", ".docker_", ".update.ad")


class Placement(NamedTuple):
    """Copy ``source`` (relative to the remote Iwd) to ``dest`` (absolute local path).

    kind "userlog" means: append the events in ``source`` to ``dest``.
    """

    source: str
    dest: str
    kind: str


def check_safe_relative(name: str, context: str = "") -> str:
    """Return ``name`` if it is a safe relative POSIX path, else raise BadInput.

    The rules are lumberjack.core.safepath's (empty, absolute, NUL, ``..``, not normalised).
    """
    where = f"{context}: " if context else ""
    reason = why_unsafe(name)
    if reason == "empty":
        raise BadInput(f"{where}empty file name from the site")
    if reason is not None:
        raise BadInput(f"{where}file name {shown(name)} from the site {reason}")
    return name


def is_schedd_file(name: str) -> bool:
    """True for a top-level name the schedd, shadow or starter writes in the Iwd."""
    return name in SCHEDD_FILES or name.startswith(SCHEDD_PREFIXES)


def allowed_roots(job: JobPaths) -> list[str]:
    """The directories the user chose in the original submit; outputs go nowhere else."""
    roots = [job.local_iwd]
    for path in (job.out, job.err, job.user_log, job.dagman_nodes_log):
        if path and path != DEVNULL:
            roots.append(posixpath.dirname(path))
    for _src, dst in job.remaps:
        if dst and "://" not in dst:
            roots.append(posixpath.dirname(resolve(dst, job.local_iwd, f"job {job.job_id} remap")))
    out: list[str] = []
    for r in roots:
        if r not in out:
            out.append(r)
    return out


def plan_outputs(
    job: JobPaths, present_files: list[str], transfer_output: Optional[str]
) -> list[Placement]:
    """Plan where each file in the job's remote Iwd goes; see the module docstring.

    ``present_files``: relative POSIX paths of the regular files found in the remote Iwd.
    ``transfer_output``: the TransferOutput expression TEXT as in job_queue.log
    (``'"a.txt,results"'``), None when unset. Pass ``job.transfer_output`` (recorded at
    export) rather than the site's copy, which is not trusted.
    """
    ctx = f"job {job.job_id}"
    present = [check_safe_relative(f, ctx) for f in present_files]
    present_set = set(present)
    plan = _Plan(job, ctx)

    if REMOTE_STDOUT in present_set and job.out not in (None, DEVNULL):
        plan.add(REMOTE_STDOUT, job.out, "stdout")
    if REMOTE_STDERR in present_set and job.err not in (None, DEVNULL) and job.err != job.out:
        plan.add(REMOTE_STDERR, job.err, "stderr")
    if REMOTE_USERLOG_NAME in present_set:
        for log in (job.user_log, job.dagman_nodes_log):
            if log and log != DEVNULL:
                plan.add(REMOTE_USERLOG_NAME, log, "userlog")

    entries = _transfer_output_entries(transfer_output, ctx)
    if entries is not None:
        for entry in entries:
            name = _sandbox_name(entry, job.preserve_relative_paths, ctx)
            if name in (REMOTE_STDOUT, REMOTE_STDERR) or _top(name).startswith(RESERVED_PREFIX):
                continue
            prefix = name + "/"
            for f in present:
                if f == name or f.startswith(prefix):
                    plan.add(f, _destination(job, f, ctx), "output")
    else:
        skip = set(job.input_names)
        for f in present:
            top = _top(f)
            if is_schedd_file(top) or top.startswith(RESERVED_PREFIX) or top in skip:
                continue
            plan.add(f, _destination(job, f, ctx), "output")
    return plan.placements


class _Plan:
    def __init__(self, job: JobPaths, ctx: str) -> None:
        self.ctx = ctx
        self.job = job
        # The roots are worked out when the first output is placed (most jobs of a large
        # import bring none back); a remap no root can come from is refused here, as it
        # always was: the only one allowed_roots refuses is a path with a NUL in it.
        self._roots = allowed_roots(job) if any("\x00" in d for _, d in job.remaps) else None
        self.placements: list[Placement] = []
        self._by_dest: dict[str, Placement] = {}

    @property
    def roots(self) -> list[str]:
        if self._roots is None:
            self._roots = allowed_roots(self.job)
        return self._roots

    def add(self, source: str, dest: str, kind: str) -> None:
        dest = normpath(dest)
        inside = any(relative_to(dest, root) is not None for root in self.roots)
        if not dest.startswith("/") or not inside:
            raise BadInput(
                f"{self.ctx}: refusing to place {shown(source)} at {shown(dest)}, "
                "outside the job's original directories"
            )
        p = Placement(source, dest, kind)
        known = self._by_dest.get(dest)
        if known == p:
            return
        if known is not None:
            raise BadInput(
                f"{self.ctx}: {shown(known.source)} and {shown(source)} "
                f"would both be placed at {shown(dest)}"
            )
        self._by_dest[dest] = p
        self.placements.append(p)


def _transfer_output_entries(text: Optional[str], ctx: str) -> Optional[list[str]]:
    if text is None or is_undefined(text):
        return None
    value = unquote_string(text)
    if value is None:
        raise BadInput(f"{ctx}: TransferOutput is not a plain string ({shown(text)})")
    return split_file_list(value)


def _sandbox_name(entry: str, preserve: bool, ctx: str) -> str:
    """Where a TransferOutput entry lands in the Iwd."""
    stripped = entry.rstrip("/")
    if not preserve or stripped.startswith("/"):
        stripped = posixpath.basename(stripped)
    return check_safe_relative(stripped, ctx)


def _destination(job: JobPaths, name: str, ctx: str) -> str:
    target = remap_name(job.remaps, name)
    if target is None:
        target = name
    if "://" in target:
        raise BadInput(f"{ctx}: output remap to URL {shown(target)} is not supported")
    return resolve(target, job.local_iwd, f"{ctx} output")


def _top(name: str) -> str:
    return name.split("/", 1)[0]
