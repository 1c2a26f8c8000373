"""The transfer driver: make one end's tree match the other's, resumably, verified.

Either direction is one exchange with the transfer helper over a carrier:

- `scan`: one command lists size + sha256 (+ kind, executable bit) of the files there;
- the plan sends only missing or changed files; a file cut short by an interrupted run
  whose bytes so far match is continued from where it stopped, otherwise resent whole;
- the files go as ONE framed stream (a JSON header line, then the bytes, per file)
  through one command, so 10,000 small files cost no 10,000 round trips;
- every sha256 is checked afterwards (uploads: the helper lists what it wrote, hashed
  as it wrote it, in the same command; downloads: here).

The site is not trusted: what it lists for a download must be regular files with safe
names. Bytes moved are reported to a `Progress` (the command line draws the bar).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO, Protocol

from lumberjack.ap.bundle import check_relative
from lumberjack.core.manifest import FileEntry
from lumberjack.errors import BadInput, RemoteError
from lumberjack.site import transfer_helper
from lumberjack.transport.carrier import Consume, Feed, LinkLost, RunResult
from lumberjack.transport.helper import helper_command
from lumberjack.transport.messages import CHUNK, last_line, one_line
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

if TYPE_CHECKING:
    from lumberjack.transport.connection import SiteConnection


#: Opens a local file to send (upload's `open_source`).
OpenSource = Callable[[Path], BinaryIO]


class Progress(Protocol):
    """Told how a transfer goes: start, the bytes as they move, finish (also on failure).
    Subclass it to implement only some (the others then do nothing)."""

    def start(self, label: str, total: int) -> None: ...

    def advance(self, n: int) -> None: ...

    def finish(self) -> None: ...


class _Silent(Progress):
    pass


def run_helper(
    site: SiteConnection,
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
    site: SiteConnection,
    root: str,
    want: dict[str, int] | None = None,
    exclude: Sequence[str] = (),
) -> dict[str, FileState]:
    """Kind, size, sha256 and mode of the files below `root` (expanded) at the site: the
    paths in `want` only (sha256 read for files no longer than wanted), or every file but
    excluded ones."""
    request = json.dumps({"want": want, "exclude": list(exclude)}).encode()
    result = run_helper(
        site, "scan", root, feed=lambda send: send(request), what="listing the files"
    )
    return parse_listing(result.stdout, f"site {site.address}")


def upload(
    site: SiteConnection,
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
    site: SiteConnection,
    remote_root: str,
    local_root: Path,
    exclude: Sequence[str] = (),
    progress: Progress | None = None,
) -> TransferReport:
    """Make local_root hold the regular files below remote_root (but `exclude` globs,
    matched against relative paths and their parent directories); fetch only what is
    missing or changed and check every sha256 on arrival."""
    started = time.monotonic()
    progress = progress or _Silent()
    local_root = Path(local_root)
    root = site.expand(remote_root)
    source = f"site {site.address}: {root}"
    listing = scan(site, root, exclude=exclude)
    wanted = check_download_listing(listing, source)
    if any(transfer_helper.excluded(entry.path, list(exclude)) for entry in wanted):
        raise RemoteError(f"{source}: listing holds excluded files; refusing it")
    local_root.mkdir(parents=True, exist_ok=True)
    sizes = {entry.path: entry.size for entry in wanted}
    have = local_states(local_root, sizes, sizes)
    steps, done = plan(wanted, have)  # the site checks our partial files' sha256
    report = _report(steps, done)
    request = json.dumps(
        {"files": [[s.path, s.offset, _state_sha(have, s)] for s in steps]}
    ).encode()
    received: list[int] = [0]

    def count(n: int) -> None:
        received[0] += n
        progress.advance(n)

    refused: list[str] = []

    def consume(stream: IO[bytes]) -> None:
        try:
            transfer_helper.receive(str(local_root), stream, count)
        except (transfer_helper.Bad, ValueError, KeyError, OSError) as exc:
            refused.append(str(exc))
            # Read to the end: the site's own error (if any) explains it better.
            while stream.read(CHUNK):
                pass

    progress.start("downloading", sum(step.length for step in steps))
    try:
        if steps:
            run_helper(
                site, "send", root, feed=lambda send: send(request), consume=consume,
                what="download",
            )  # fmt: skip
    finally:
        progress.finish()
    if refused:
        raise RemoteError(f"{source}: download refused: {one_line(refused[0])}")
    if steps:
        # sha256 of each whole file as it now is (resumed ones included).
        sent = {step.path for step in steps}
        arrived = local_states(local_root, sent, sizes)
        problems = verify_states([entry for entry in wanted if entry.path in sent], arrived)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise RemoteError(
                f"{source}: after download {local_root}/{problems[0]}{more}; the file "
                "changed at the site or in transit; run again"
            )
    report.sent_bytes = received[0]
    report.seconds = time.monotonic() - started
    return report


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
    """A local file opened for reading, never through a symbolic link at its name."""
    return os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb")


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
