"""A self-checkpointing job that comes home unfinished resumes from the site's checkpoint.

At the site the remote schedd keeps a job's last checkpoint (its TransferCheckpoint
files, and its stdout and stderr so far) in the job's spool directory, which is also
the job's remote Iwd: the returned spool brings it back. HTCondor's shadow sends every
file of a job's spool directory with the job's input when no CheckpointDestination is
set (FileTransfer::AddFilesFromSpoolTo), so a checkpoint put into the LOCAL schedd's
spool directory for the job is what the local schedd's next run of the job starts from.
No attribute of the job changes.

That directory is ``SPOOL/<cluster % 10000>/<proc % 10000>/cluster<C>.proc<P>.subproc0``
(gen_ckpt_name): the two upper levels are the schedd's (SPOOL's owner, 0755), the job's
own level is the owner's, 0700 (the shadow reads it as the owner). Here the upper levels
are made as SPOOL's owner, the job's level as SPOOL's owner and then handed to the job's
owner, as the schedd does (createJobSpoolDirectory); every checkpoint file is written as
the job's owner, through directory descriptors, never through a link.

What is copied is only what the checkpoint names, from files import has already checked
(plan_import: regular files, safe names, within the caps): the returned spool is read
as whoever may read it, and each file is opened again without following links and
copied to exactly the size it had. The copy is part of the job's placement: a job whose
placement is journaled is never copied again, so a rerun of import never writes over a
newer local checkpoint (the local schedd can run the job only after the merge, after
the journal). A copy that fails removes what it wrote: the job starts anew, reported.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lumberjack.ap import safe_write
from lumberjack.ap.file_lists import split_file_list
from lumberjack.ap.job_paths import JobPaths
from lumberjack.ap.remote_layout import DEVNULL, REMOTE_STDERR, REMOTE_STDOUT
from lumberjack.ap.schedd import LocalSchedd
from lumberjack.core import jobqueuelog as jql
from lumberjack.core.classad_text import is_undefined, unquote_string
from lumberjack.core.jobstatus import JobStatus
from lumberjack.core.safepath import why_unsafe
from lumberjack.errors import BadInput, LumberjackError
from lumberjack.host.identity import Owner, acting_as

#: The job attribute of transfer_checkpoint_files (condor_submit puts it in the cluster ad).
CHECKPOINT_ATTR = "TransferCheckpoint"
#: Statuses a job comes home in that let it run again here (held: once released).
UNFINISHED = frozenset({JobStatus.IDLE, JobStatus.HELD})
#: Why a job that does not checkpoint itself starts anew (the text output leaves it out).
NOT_CHECKPOINTING = "no transfer_checkpoint_files"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Checkpoint:
    """The files of a job's site checkpoint: names relative to the returned job
    directory, the same in the local spool directory for the job."""

    cluster: int
    proc: int
    files: list[str] = field(default_factory=list)

    @property
    def job_dir(self) -> str:
        """The job's spool directory below SPOOL (gen_ckpt_name)."""
        c, p = self.cluster, self.proc
        return f"{c % 10000}/{p % 10000}/cluster{c}.proc{p}.subproc0"


class CannotBring(Exception):
    """Why a checkpoint stays at the site: the job starts anew (reported)."""


def job_attr(ads: dict[str, jql.Ad], job_id: str, name: str) -> str | None:
    """An attribute of a job of the access point's queue: its proc ad's, else its
    cluster ad's (where condor_submit writes most)."""
    proc_ad = ads.get(job_id)
    value = proc_ad.get(name) if proc_ad is not None else None
    if value is None:
        cluster_ad = ads.get(jql.cluster_key(int(job_id.split(".")[0])))
        value = cluster_ad.get(name) if cluster_ad is not None else None
    return value


def plan(
    paths: JobPaths, status: JobStatus | None, present: list[str], ads: dict[str, jql.Ad]
) -> Checkpoint | str | None:
    """What comes home of a job's checkpoint: a Checkpoint; the reason it starts anew
    (str); None for a job that will not run again (completed, removed).

    ``present``: the returned job directory's files, already checked; ``ads``: the
    ACCESS POINT's queue (merge_queue), whose TransferCheckpoint counts, never the site's.
    """
    if status not in UNFINISHED:
        return None
    entries = _entries(job_attr(ads, paths.job_id, CHECKPOINT_ATTR))
    if entries is None:
        return NOT_CHECKPOINTING
    names = set()
    for entry in entries:
        # The spool keeps an entry under its basename (preserve_relative_paths: its path).
        name = entry.rstrip("/") if paths.preserve_relative_paths else _basename(entry)
        if why_unsafe(name, printable=True) is None:
            names.add(name)
    # The starter checkpoints the job's stdout and stderr with its files.
    if paths.out not in (None, DEVNULL):
        names.add(REMOTE_STDOUT)
    if paths.err not in (None, DEVNULL):
        names.add(REMOTE_STDERR)
    files = [f for f in present if f in names or any(f.startswith(n + "/") for n in names)]
    if not any(f not in (REMOTE_STDOUT, REMOTE_STDERR) for f in files):
        return "no checkpoint came back from the site"
    return Checkpoint(paths.cluster, paths.proc, sorted(files))


def _entries(text: str | None) -> list[str] | None:
    if text is None or is_undefined(text):
        return None
    value = unquote_string(text)
    entries = split_file_list(value) if value is not None else []
    return entries or None


def _basename(entry: str) -> str:
    return posixpath.basename(entry.rstrip("/"))


class Planned(Protocol):
    """A job as import planned it (output_writer.JobPlan)."""

    paths: JobPaths
    job_dir: Path
    checkpoint: Checkpoint | str | None


class Tally(Protocol):
    """Where an import reports its unfinished jobs (importer.ImportReport)."""

    resume_from_site: list[str]
    start_anew: dict[str, str]


def tally(job_id: str, checkpoint: Checkpoint | str | None, report: Tally) -> None:
    """A planned job in the report: it resumes from its site checkpoint, or starts anew."""
    if isinstance(checkpoint, Checkpoint):
        report.resume_from_site.append(job_id)
    elif checkpoint is not None:
        report.start_anew[job_id] = checkpoint


class Homecoming:
    """Where one import's checkpoints go: ``spool`` when given, else the local schedd's
    SPOOL, asked once, when a first checkpoint needs it. A job whose checkpoint cannot
    come home moves in ``report`` to the jobs that start anew."""

    def __init__(self, schedd: LocalSchedd | None, spool: str | None, report: Tally) -> None:
        self.schedd, self.spool, self.report, self.problem = schedd, spool, report, ""

    def bring(self, plan: Planned, owner: Owner | None, reader: Owner | None) -> None:
        """Put a planned job's checkpoint in place (nothing for other jobs); ``owner``
        acts for the job, ``reader`` reads the returned spool."""
        if not isinstance(plan.checkpoint, Checkpoint):
            return
        why = self._bring(plan.checkpoint, plan.job_dir, owner, reader)
        if why:
            job_id = plan.paths.job_id
            if job_id in self.report.resume_from_site:
                self.report.resume_from_site.remove(job_id)
            self.report.start_anew[job_id] = why

    def _bring(
        self, checkpoint: Checkpoint, returned_dir: Path, owner: Owner | None, reader: Owner | None
    ) -> str | None:
        """None when the checkpoint is in place; else why the job starts anew."""
        if self.spool is None and not self.problem:
            try:
                if self.schedd is None:
                    raise LumberjackError("no local schedd to ask where its SPOOL is")
                self.spool = self.schedd.spool()
            except LumberjackError as exc:
                self.problem = f"{exc}; the checkpoint stays in the returned spool"
        if self.spool is None:
            return self.problem
        try:
            bring_home(checkpoint, returned_dir, self.spool, owner, reader)
        except CannotBring as exc:
            return str(exc)
        return None


def bring_home(
    checkpoint: Checkpoint,
    returned_dir: Path,
    spool_root: str,
    owner: Owner | None,
    reader: Owner | None,
) -> int:
    """Copy the checkpoint from the returned job directory into the local spool directory
    for the job; the bytes copied. ``owner`` acts for the job (None: this process),
    ``reader`` reads the returned spool. CannotBring, with nothing of the checkpoint
    left behind, when it cannot be done."""
    sources: dict[str, tuple[int, os.stat_result]] = {}
    try:
        with acting_as(reader):
            for name in checkpoint.files:
                sources[name] = safe_write.open_returned(str(returned_dir / name))
        job_fd = _job_spool_dir(spool_root, checkpoint, owner)
        try:
            with acting_as(owner):
                return _copy(job_fd, sources)
        finally:
            os.close(job_fd)
    except BadInput as exc:
        raise CannotBring(str(exc)) from None
    except OSError as exc:
        where = f"{spool_root}/{checkpoint.job_dir}"
        raise CannotBring(f"cannot write {where}: {exc.strerror or exc}") from None
    finally:
        for fd, _ in sources.values():
            os.close(fd)


def _copy(job_fd: int, sources: dict[str, tuple[int, os.stat_result]]) -> int:
    """Write every file; on any failure remove the ones written (a half checkpoint,
    some files new and some old, would resume from a state that never was)."""
    done: list[str] = []
    total = 0
    try:
        for name, (fd, st) in sources.items():
            dir_fd = _subdir(job_fd, posixpath.dirname(name))
            try:
                safe_write.write_file(dir_fd, posixpath.basename(name), fd, st.st_size,
                                      bool(st.st_mode & 0o111))  # fmt: skip
            finally:
                if dir_fd != job_fd:
                    os.close(dir_fd)
            done.append(name)
            total += st.st_size
    except BaseException:
        for name in done:
            try:
                os.unlink(name, dir_fd=job_fd)
            except OSError:
                pass
        raise
    return total


def _subdir(job_fd: int, relative: str) -> int:
    """A directory below the job's, made as needed (mode 0700), never through a link."""
    fd = job_fd
    for part in relative.split("/") if relative else ():
        try:
            new = _open_or_make(fd, part, 0o700)
        finally:
            if fd != job_fd:
                os.close(fd)
        fd = new
    return fd


def _open_or_make(parent_fd: int, name: str, mode: int) -> int:
    _make(parent_fd, name, mode)
    return _open_dir(parent_fd, name)


def _make(parent_fd: int, name: str, mode: int) -> bool:
    """True when this call made the directory."""
    try:
        os.mkdir(name, mode, dir_fd=parent_fd)
    except FileExistsError:
        return False
    return True


def _open_dir(parent_fd: int, name: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a link or a file in the way
            raise BadInput(f"{name} in the local spool is not a directory") from None
        raise


def _job_spool_dir(spool_root: str, checkpoint: Checkpoint, owner: Owner | None) -> int:
    """The job's spool directory, opened: made as the schedd makes it when missing, else
    opened as the job's owner (it is theirs, 0700)."""
    fds = [safe_write.open_dir(spool_root)]
    try:
        root = os.fstat(fds[0])
        upper, name = checkpoint.job_dir.rsplit("/", 1)
        with acting_as(_spool_owner(root)):
            for level in upper.split("/"):
                made = _make(fds[-1], level, 0o755)
                fds.append(_open_dir(fds[-1], level))
                if made:  # whatever this process's umask: the owner must pass through
                    os.fchmod(fds[-1], 0o755)
                _check_level(fds[-1], root.st_uid, f"{spool_root}/{upper}")
            made = _make(fds[-1], name, 0o700)
            job_fd = _open_dir(fds[-1], name) if made else -1
        if not made:
            with acting_as(owner):
                job_fd = _open_dir(fds[-1], name)
        try:
            _hand_over(job_fd, made, owner, f"{spool_root}/{checkpoint.job_dir}")
        except BaseException:
            os.close(job_fd)
            raise
        return job_fd
    finally:
        for fd in fds:
            os.close(fd)


def _spool_owner(root: os.stat_result) -> Owner | None:
    """Who makes the schedd's directories: SPOOL's owner (root itself, or we are not
    root: this process)."""
    if os.geteuid() != 0 or root.st_uid == 0:
        return None
    return Owner("the schedd's spool", root.st_uid, root.st_gid, (root.st_gid,))


def _check_level(fd: int, uid: int, where: str) -> None:
    st = os.fstat(fd)
    if st.st_uid != uid or st.st_mode & 0o022:
        raise BadInput(f"{where}: a level of the spool not the schedd's alone; not using it")


def _hand_over(job_fd: int, made: bool, owner: Owner | None, where: str) -> None:
    """The job's directory belongs to its owner: a new one is given to them (root
    only), an existing one must be theirs already."""
    uid, gid = (owner.uid, owner.gid) if owner is not None else (os.geteuid(), os.getegid())
    if made and os.geteuid() == 0:
        os.fchown(job_fd, uid, gid)
    st = os.fstat(job_fd)
    if st.st_uid != uid or not stat.S_ISDIR(st.st_mode):
        raise BadInput(f"{where} is not the job owner's directory")
