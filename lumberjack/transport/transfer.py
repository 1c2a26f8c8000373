"""The transfer driver: make one end's tree match the other's, resumably, verified.

Either direction is one exchange with the transfer helper over a carrier:

- `scan`: one command lists size + sha256 (+ kind, executable bit) of the files there;
- the plan sends only missing or changed files; a file cut short by an interrupted run
  whose bytes so far match is continued from where it stopped, otherwise resent whole;
- the files go as ONE framed stream (a JSON header line, then the bytes, per file)
  through one command, so 10,000 small files cost no 10,000 round trips;
- every sha256 is checked afterwards (uploads: the helper lists what it wrote, hashed
  as it wrote it, in the same command; downloads: here).

The site is not trusted: a download takes only regular files of one name with safe
names (others are skipped and reported) within the caps of core.returns, checked on the
listing and again as the bytes arrive, and only what fits where it lands (free space
less a reserve, judged on the listing before a byte moves); runs of zeros are written
as holes, so a sparse file stays sparse. Bytes moved are reported to a `Progress` (the
command line draws the bar).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, BinaryIO, Protocol

from lumberjack.core import returns
from lumberjack.core.manifest import FileEntry
from lumberjack.core.message_text import one_line, printable
from lumberjack.core.returns import Limits
from lumberjack.core.units import format_bytes
from lumberjack.errors import BadInput, RemoteError
from lumberjack.host.bounded_read import open_regular
from lumberjack.host.input_paths import check_relative
from lumberjack.site import transfer_helper
from lumberjack.transport.carrier import Consume, Feed, LinkLost, Reach, RunResult
from lumberjack.transport.helper import helper_command
from lumberjack.transport.messages import CHUNK, last_line
from lumberjack.transport.states import (
    FileState,
    Step,
    TransferReport,
    check_download_listing,
    local_states,
    parse_listing,
    plan,
    verify_states,
)

#: Opens a local file to send (upload's `open_source`).
OpenSource = Callable[[Path], BinaryIO]
#: Chunks read past a refused frame to let the site's own error arrive.
_DRAIN_CHUNKS = 16


class Progress(Protocol):
    """Told how a transfer goes: start, the bytes as they move, finish (also on failure).
    Subclass it to implement only some (the others then do nothing)."""

    def start(self, label: str, total: int) -> None: ...

    def advance(self, n: int) -> None: ...

    def finish(self) -> None: ...


class _Silent(Progress):
    pass


def run_helper(
    site: Reach,
    mode: str,
    root: str,
    *,
    feed: Feed | None = None,
    consume: Consume | None = None,
    what: str,
) -> RunResult:
    """Run the transfer helper at the site; RemoteError (one line, saying what to do) if
    python3 is missing, the helper refuses, or the connection drops."""
    try:
        result = site.carrier.exec(helper_command(mode, root), feed=feed, consume=consume)
    except LinkLost as exc:
        raise RemoteError(
            f"connection to {site.address} lost during {what}; run the same command "
            f"again to resume ({exc})"
        ) from exc
    if result.exited == 127 or (not result.ok and "python3: " in result.stderr):
        raise RemoteError(
            f"site {site.address} has no python3 on PATH; lumberjack needs python3 >= 3.9 "
            "there (load it in the login shell's startup file)"
        )
    if not result.ok:
        raise RemoteError(
            f"site {site.address}: {what} in {root} failed: {last_line(result.stderr)}"
        )
    return result


def scan(
    site: Reach,
    root: str,
    want: dict[str, int] | None = None,
    exclude: Sequence[str] = (),
    max_size: int | None = None,
) -> dict[str, FileState]:
    """Kind, size, sha256 and mode of the files below `root` (expanded) at the site: the
    paths in `want` only (sha256 read for files no longer than wanted), or every file but
    excluded ones (sha256 read for files no longer than `max_size`)."""
    request = json.dumps({"want": want, "exclude": list(exclude), "max_size": max_size}).encode()
    result = run_helper(
        site, "scan", root, feed=lambda send: send(request), what="listing the files"
    )
    return parse_listing(result.stdout, f"site {site.address}")


def upload(
    site: Reach,
    local_root: Path,
    remote_root: str,
    files: list[FileEntry],
    progress: Progress | None = None,
    open_source: OpenSource | None = None,
) -> TransferReport:
    """Make remote_root hold `files` (from local_root) exactly; send only what is
    missing or changed, then check every sha256 the site reports. `open_source` opens a
    local file for reading (default: as this process, never through a link): root
    passes one that opens as the bundle's owner."""
    started = time.monotonic()
    progress = progress or _Silent()
    local_root = Path(local_root)
    opener = open_source or open_plain
    for entry in files:
        check_relative(entry.path, "manifest")
    root = site.expand(remote_root)
    wanted = {entry.path: entry.size for entry in files}
    have = scan(site, root, want=wanted)

    def prefix_sha(path: str, length: int) -> str:
        with opener(local_root / path) as handle:
            return _sha_prefix(handle, length).hexdigest()

    steps, done = plan(files, have, prefix_sha)
    for step in steps:  # cheap: catch a changed bundle before sending anything
        source = local_root / step.path
        try:
            with opener(source) as handle:
                info = os.fstat(handle.fileno())
        except OSError:
            info = None
        if info is None or not stat.S_ISREG(info.st_mode) or info.st_size != step.size:
            raise BadInput(f"{source}: missing or changed since the manifest was written")
    report = _report(steps, done)

    def feed(send: Callable[[bytes], Any]) -> None:
        out = _Batched(send)
        for step in steps:
            _send_file(out, local_root, step, progress, opener)
        out.write(b'{"end": true}\n')
        out.flush()

    progress.start("uploading", sum(step.length for step in steps))
    try:
        if steps:
            result = run_helper(site, "recv", root, feed=feed, what="upload")
    finally:
        progress.finish()
    if steps:
        # What the site wrote (hashed as it wrote it), and what it held already.
        written = parse_listing(result.stdout, f"site {site.address}")
        problems = verify_states(files, {**have, **written})
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise RemoteError(
                f"site {site.address}: after upload {root}/{problems[0]}{more}; run again to resend"
            )
    report.seconds = time.monotonic() - started
    return report


def download(
    site: Reach,
    remote_root: str,
    local_root: Path,
    exclude: Sequence[str] = (),
    progress: Progress | None = None,
    limits: Limits | None = None,
    max_files: int | None = None,
    job_log: str | None = None,
) -> TransferReport:
    """Make local_root hold the regular files below remote_root (but `exclude` globs,
    matched against relative paths and their parent directories); fetch only what is
    missing or changed and check every sha256 on arrival.

    The site is not trusted. Unsafe names, symlinks, special files and files with other
    hard links are skipped and named in the report (`bad_entries`), never written here,
    whether the listing shows them or they turn up while the files are sent. `limits`
    (default: the environment's) caps each file, each job's bytes and files (its
    directory in a remote spool, core.returns.job_of) and the whole: judged on the sizes
    the site lists before anything moves, then on the bytes as they arrive; the site
    never reads a file over the per-file cap. A job over a per-job cap stays there but
    for its `job_log` (report.over_cap); past the export's: ReturnRefused, at once. What
    is to move must fit the free space where it lands, less a reserve (core.returns
    room_at), or NoRoom before anything moves.
    `max_files` caps the files listed in all (for trees without jobs' directories).
    """
    started = time.monotonic()
    progress = progress or _Silent()
    limits = limits or Limits.from_env(BadInput)
    local_root = Path(local_root)
    root = site.expand(remote_root)
    source = f"site {site.address}: {root}"
    listing = scan(site, root, exclude=exclude, max_size=limits.file_bytes)
    wanted, bad = check_download_listing(listing, limits.file_bytes)
    if any(transfer_helper.excluded(entry.path, list(exclude)) for entry in wanted):
        raise RemoteError(f"{source}: listing holds excluded files; refusing it")
    if max_files is not None and len(listing) > max_files:
        raise ReturnRefused(f"{source}: more than {max_files} files listed; nothing fetched")
    wanted, over = _leave_over_cap(wanted, limits, job_log)
    guard = ReturnGuard(limits, source)
    for entry in wanted:  # the sizes the site declares: refused before anything moves
        guard.declare(entry.path, entry.size)
    local_root.mkdir(parents=True, exist_ok=True)
    sizes = {entry.path: entry.size for entry in wanted}
    have = local_states(local_root, sizes, sizes)
    steps, done = plan(wanted, have)  # the site checks our partial files' sha256
    room = returns.room_at(str(local_root), BadInput)
    guard.check_room(sum(step.length for step in steps), room)
    report = _report(steps, done)
    report.bad_entries = bad
    report.over_cap = over
    request = json.dumps(
        {"files": [[s.path, s.offset, _state_sha(have, s)] for s in steps],
         "max_size": limits.file_bytes}
    ).encode()  # fmt: skip
    guard.expect(steps, done)
    receiver = _Receiver(local_root, guard, progress)
    progress.start("downloading", sum(step.length for step in steps))
    try:
        if steps:
            receiver.receive_from(site, root, request)
    finally:
        progress.finish()
    if receiver.refused:
        raise RemoteError(f"{source}: download refused: {one_line(receiver.refused[0])}")
    report.bad_entries += guard.skipped
    if steps:
        # sha256 of each whole file as it now is (resumed ones included).
        sent = {step.path for step in steps} - {path for path, _ in guard.skipped}
        arrived = local_states(local_root, sent, sizes)
        problems = verify_states([entry for entry in wanted if entry.path in sent], arrived)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise RemoteError(
                f"{source}: after download {local_root}/{problems[0]}{more}; the file "
                "changed at the site or in transit; run again"
            )
    report.sent_bytes = receiver.received
    report.seconds = time.monotonic() - started
    return report


def _leave_over_cap(
    wanted: list[FileEntry], limits: Limits, job_log: str | None
) -> tuple[list[FileEntry], dict[str, str]]:
    """The files to fetch, and the jobs over a per-job cap (job -> why): of those only
    `job_log` (right in the job's directory, itself within the cap) is fetched. Import
    holds them, as HTCondor holds only the job over its output limit."""
    over = returns.jobs_over_cap(((entry.path, entry.size) for entry in wanted), limits)

    def kept(entry: FileEntry) -> bool:
        if returns.job_of(entry.path) not in over:
            return True
        is_log = entry.path.count("/") == 3 and entry.path.rsplit("/", 1)[1] == job_log
        return is_log and entry.size <= limits.job_bytes

    return ([entry for entry in wanted if kept(entry)] if over else wanted), over


class _Receiver:
    """The download's end of the site's stream: files written below `root` as the
    guard admits them; the first refusal kept to report."""

    def __init__(self, root: Path, guard: ReturnGuard, progress: Progress) -> None:
        self.root, self.guard, self.progress = root, guard, progress
        self.received = 0
        self.refused: list[str] = []

    def receive_from(self, site: Reach, root: str, request: bytes) -> None:
        """The files `request` asks the site's helper to send from `root`."""
        try:
            run_helper(site, "send", root, feed=lambda send: send(request),
                       consume=self.consume, what="download")  # fmt: skip
        except _StreamCut:
            pass  # the command ended with it; `refused` says why

    def count(self, n: int) -> None:
        self.received += n
        self.progress.advance(n)

    def consume(self, stream: IO[bytes]) -> None:
        try:
            transfer_helper.receive(str(self.root), stream, self.count, guard=self.guard)
        except (transfer_helper.Bad, ValueError, KeyError, TypeError, OSError) as exc:
            self.refused.append(str(exc))
            # Read on a little: the site's own error (if any) explains it better; not
            # to the end, which a hostile site need never reach: the command is ended
            # then (the carrier's waiting for its exit would wait for ever).
            for _ in range(_DRAIN_CHUNKS):
                if not stream.read(CHUNK):
                    return
            raise _StreamCut from exc


class _StreamCut(Exception):
    """The download stopped reading a stream the site went on sending."""


class ReturnRefused(RemoteError):
    """The site returns more than a cap allows; the download stopped there."""


class NoRoom(ReturnRefused):
    """What the site offers is more than the file system it lands on can take."""


class ReturnGuard:
    """The caps on a download, held on the sizes the site declares and again on the
    bytes as they arrive; and the check of each frame of the site's stream: only the
    files asked for, no longer than asked for. Entries the site skips are kept."""

    def __init__(self, limits: Limits, source: str) -> None:
        self.limits, self.source = limits, source
        self.job_bytes: dict[str, int] = {}
        self.job_files: dict[str, int] = {}
        self.total = 0
        self.asked: dict[str, Step] = {}
        self.current: str | None = None
        self.left = 0
        self.skipped: list[tuple[str, str]] = []

    def declare(self, path: str, size: int) -> None:
        """Count one listed file; ReturnRefused past a cap."""
        limits = self.limits
        if size > limits.file_bytes:
            self._refuse(f"{path!r} is {size} bytes", limits.file_bytes, limits.job_bytes_var)
        job = returns.job_of(path)
        if job is not None:
            self.job_files[job] = self.job_files.get(job, 0) + 1
            if self.job_files[job] > limits.job_files:
                self._refuse(f"job {job} returns more than {limits.job_files} files",
                             limits.job_files, limits.job_files_var, "files")  # fmt: skip
        self.charge(path, size)

    def charge(self, path: str, size: int) -> None:
        limits = self.limits
        job = returns.job_of(path)
        if job is not None:
            self.job_bytes[job] = self.job_bytes.get(job, 0) + size
            if self.job_bytes[job] > limits.job_bytes:
                self._refuse(f"job {job} returns more than {limits.job_bytes} bytes",
                             limits.job_bytes, limits.job_bytes_var)  # fmt: skip
        self.total += size
        if self.total > limits.total_bytes:
            self._refuse(f"the export returns more than {limits.total_bytes} bytes",
                         limits.total_bytes, limits.total_bytes_var)  # fmt: skip

    def check_room(self, offered: int, room: returns.Room) -> None:
        """NoRoom when the bytes still to move would leave less than `room` keeps free.
        Counted at their listed size (sparse or not): the site's listing is all there is
        to judge by before anything moves, and no stream may carry more."""
        if offered > room.usable:
            raise NoRoom(
                f"{self.source}: offers {format_bytes(offered)} but {room.path} has "
                f"{format_bytes(room.free)} free (keeping {format_bytes(room.keep)}, "
                f"{room.keep_var}); nothing fetched"
            )

    def expect(self, steps: list[Step], done: list[FileEntry]) -> None:
        """From here on count what arrives: the bytes already here, then the stream."""
        self.job_bytes, self.total = {}, 0
        self.asked = {step.path: step for step in steps}
        for entry in done:
            self.charge(entry.path, entry.size)
        for step in steps:
            self.charge(step.path, step.offset)

    def head(self, head: dict[str, Any]) -> bool:
        """One frame's header: False for an entry the site skips (nothing follows)."""
        self._finish()
        path = head.get("p")
        step = self.asked.pop(path, None) if isinstance(path, str) else None
        if step is None:
            raise transfer_helper.Bad(f"the site sent {str(path)[:80]!r}, which was not asked for")
        if "over" in head:
            self._refuse(f"{path!r} is now {head['over']} bytes", self.limits.file_bytes,
                         self.limits.job_bytes_var)  # fmt: skip
        if "skip" in head:
            why = printable(str(head["skip"])[:200])
            self.skipped.append((path, f"skipped by the site: {why}"))  # its words, made safe
            return False
        offset, length = int(head["o"]), int(head["n"])
        if offset not in (0, step.offset) or offset + length != step.size:
            raise transfer_helper.Bad(
                f"{path}: the site sends bytes {offset}..{offset + length} of a file it "
                f"listed at {step.size} bytes; run again"
            )
        if offset < step.offset:  # the site restarts the file: its kept start is dropped
            self.charge(path, -step.offset)
        self.current, self.left = path, length
        return True

    def take(self, n: int) -> None:
        """Bytes of the current file, before they are written."""
        if self.current is None or n > self.left:
            raise transfer_helper.Bad("the site sends more bytes than it announced")
        self.left -= n
        self.charge(self.current, n)

    def _finish(self) -> None:
        self.current, self.left = None, 0

    def _refuse(self, what: str, cap: int, var: str, unit: str = "bytes") -> None:
        raise ReturnRefused(
            f"{self.source}: {what}, over the cap of {cap} {unit} per "
            f"{'export' if 'TOTAL' in var else 'job'} ({var}); nothing more fetched"
        )


class _Batched:
    """Coalesce small writes (headers, small files) into large channel sends."""

    def __init__(self, send: Callable[[bytes], Any], size: int = CHUNK) -> None:
        self.send = send
        self.size = size
        self.buffer = bytearray()

    def write(self, data: bytes) -> None:
        if len(data) >= self.size and not self.buffer:
            self.send(data)
            return
        self.buffer += data
        if len(self.buffer) >= self.size:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            self.send(bytes(self.buffer))
            self.buffer.clear()


def _sha_prefix(handle: IO[bytes], length: int) -> Any:
    digest = hashlib.sha256()
    left = length
    while left > 0:
        data = handle.read(min(1 << 20, left))
        if not data:
            break
        digest.update(data)
        left -= len(data)
    return digest


def open_plain(path: Path) -> BinaryIO:
    """A local regular file opened for reading (bounded_read: never through a symbolic
    link at its name, never a FIFO or device); the transfer bounds its reads by the
    manifest's sizes."""
    return open_regular(path, "bundle file")  # type: ignore[return-value]


def _send_file(
    out: _Batched, local_root: Path, step: Step, progress: Progress, opener: OpenSource
) -> None:
    """Frame one file onto the stream, hashing it on the way against the manifest."""
    head = {"p": step.path, "o": step.offset, "n": step.length, "x": step.executable}
    out.write((json.dumps(head) + "\n").encode())
    with opener(local_root / step.path) as handle:
        digest = _sha_prefix(handle, step.offset)
        left = step.length
        while left:
            data = handle.read(min(CHUNK, left))
            if not data:
                raise BadInput(f"{local_root / step.path}: shrank while being sent")
            digest.update(data)
            out.write(data)
            left -= len(data)
            progress.advance(len(data))
    if digest.hexdigest() != step.sha256:
        # The rest of the stream is dropped with the channel: nothing wrong is kept.
        raise BadInput(
            f"{local_root / step.path}: sha256 differs from the manifest; the bundle changed "
            "since export"
        )


def _report(steps: list[Step], done: list[FileEntry]) -> TransferReport:
    return TransferReport(
        sent_files=len(steps),
        sent_bytes=sum(step.length for step in steps),
        skipped_files=len(done),
        skipped_bytes=sum(entry.size for entry in done) + sum(step.offset for step in steps),
        resumed_files=sum(1 for step in steps if 0 < step.offset < step.size),
    )


def _state_sha(have: dict[str, FileState], step: Step) -> str | None:
    state = have.get(step.path)
    return state.sha256 if step.offset and state is not None else None
