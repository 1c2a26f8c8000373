"""The transfer helper: the program at the far end of every upload and download.

Modes (argv: MODE ROOT [MODE_ARG]; requests on stdin, answers on stdout):

- `scan`: JSON lines [kind, path, size, executable, sha256, links] for the files below
  ROOT (the paths asked for, or every file but excluded ones); symlinks and special
  files are listed (kind as `ls -l` shows it), never followed; a file over `max_size`
  is listed without its sha256 (never read);
- `recv`: write a framed stream (per file a JSON header line {"p", "o", "n", "x"}, then
  its bytes; {"end": true} last) below ROOT, continuing files at the offset given; then
  list the files written as `scan` does, their sha256 taken of the bytes as they were
  written (a continued file's kept start read first), so no second pass reads them;
- `send`: frame the files asked for onto stdout, from the offset asked for when the
  receiver's bytes so far match; a file that is no longer a plain file of one name is
  framed as {"p", "skip": why} with no bytes, one over `max_size` as {"p", "over": size}
  (never read: the receiver stops there);
- `put`: write stdin as the whole file ROOT (mode MODE_ARG, octal) or nothing.

It runs at the site (python3 >= 3.9, standard library only) and, for downloads, here:
the access point imports it and runs `receive` on the site's stream, so both
directions share one receiver. How it gets to the site: see lumberjack.transport.helper.
Exit status 3 with one line on stderr when it refuses something.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import stat
import sys
from typing import IO, Any, Callable, Optional

from lumberjack.core.returns import entry_problem, mode_kind
from lumberjack.core.safepath import why_unsafe
from lumberjack.core.sparse import end_at, write_all, write_past_end

CHUNK = 1 << 20
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class Bad(Exception):
    """Something the helper refuses to do (exit status 3, one line)."""


def check(rel: Any) -> str:
    """A path below the root, printable (the site is not trusted, nor is its stream)."""
    reason = why_unsafe(rel, printable=True)
    if reason == "is not UTF-8":
        raise Bad(f"unsafe path {rel!r} (not UTF-8)")
    if reason is not None:
        raise Bad(f"unsafe path {rel!r}")
    return rel


def sha_fd(fd: int, limit: Optional[int] = None) -> str:
    return _digest_fd(fd, hashlib.sha256(), limit).hexdigest()


def _digest_fd(fd: int, digest: Any, limit: Optional[int] = None) -> Any:
    left = limit
    while left is None or left > 0:
        data = os.read(fd, CHUNK if left is None else min(CHUNK, left))
        if not data:
            break
        digest.update(data)
        if left is not None:
            left -= len(data)
    return digest


def real_parents(root: str, rel: str, seen: set[str], create: bool) -> None:
    """Every directory between root and rel must be a real directory (no symlink)."""
    current = root
    for part in rel.split("/")[:-1]:
        current = current + "/" + part
        if current in seen:
            continue
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            if not create:
                raise
            os.mkdir(current, 0o755)
            st = os.lstat(current)
        if not stat.S_ISDIR(st.st_mode):
            raise Bad(f"{current} is not a directory (symlink or file in the way)")
        seen.add(current)


def describe(full: str, rel: str, want_size: Optional[int] = None) -> Optional[list]:
    try:
        st = os.lstat(full)
    except (FileNotFoundError, NotADirectoryError):
        return None
    kind = mode_kind(st.st_mode)
    sha = None
    # A file longer than wanted is wrong anyway: no need to read it.
    if kind == "f" and (want_size is None or st.st_size <= want_size):
        fd = os.open(full, os.O_RDONLY | NOFOLLOW)
        try:
            sha = sha_fd(fd)
        finally:
            os.close(fd)
    return [kind, rel, st.st_size, bool(st.st_mode & 0o100), sha, st.st_nlink]


def excluded(rel: str, patterns: list[str]) -> bool:
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        if any(fnmatch.fnmatchcase(prefix, p) for p in patterns):
            return True
    return False


def emit(out: IO[str], item: list) -> None:
    out.write(json.dumps(item) + "\n")


def scan(root: str, request: dict, out: IO[str]) -> None:
    want = request.get("want")
    if want is not None:
        seen = set()
        for rel, size in want.items():
            check(rel)
            try:
                real_parents(root, rel, seen, False)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except Bad:
                emit(out, ["l", rel, 0, False, None])
                continue
            item = describe(root + "/" + rel, rel, size)
            if item is not None:
                emit(out, item)
        return
    patterns = request.get("exclude") or []
    max_size = request.get("max_size")
    if not os.path.isdir(root) or os.path.islink(root):
        raise Bad(f"{root} is not a directory")
    stack = [""]
    while stack:
        prefix = stack.pop()
        with os.scandir(root + "/" + prefix if prefix else root) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            rel = prefix + entry.name
            if excluded(rel, patterns):
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(rel + "/")
            else:
                item = describe(entry.path, rel, max_size)
                if item is not None:
                    emit(out, item)


def receive(
    root: str,
    stream: IO[bytes],
    progress: Optional[Callable[[int], None]] = None,
    listing: Optional[list] = None,
    guard: Any = None,
) -> tuple[int, int]:
    """Write the framed stream's files below root; return (files, bytes). With
    `listing`, append each file's scan line (sha256 of the whole file as written).
    `guard` (downloads: the site is not trusted) sees each header first, `guard.head(h)`
    False: nothing of that entry follows, and each piece before it is written,
    `guard.take(n)`; either raises to stop the stream there."""
    os.makedirs(root, exist_ok=True)
    seen = set()
    files = total = 0
    while True:
        line = stream.readline(65536)
        if not line.endswith(b"\n"):
            raise Bad("stream ended early (connection lost?)")
        head = json.loads(line)
        if head.get("end"):
            return files, total
        if guard is not None and not guard.head(head):
            continue
        rel = check(head["p"])
        offset, length = int(head["o"]), int(head["n"])
        if offset < 0 or length < 0:
            raise Bad(f"{rel}: bad header")
        real_parents(root, rel, seen, True)
        full = root + "/" + rel
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise Bad(f"{full} is a directory")
        if st is not None and not stat.S_ISREG(st.st_mode):
            os.unlink(full)  # a symlink or special file where a file goes: replace it
            st = None
        if offset and (st is None or st.st_size < offset):
            raise Bad(f"{rel}: cannot continue at byte {offset}")
        flags = os.O_WRONLY | os.O_CREAT | NOFOLLOW | (0 if offset else os.O_TRUNC)
        digest = None
        if listing is not None:
            digest = hashlib.sha256()
            if offset:
                kept = os.open(full, os.O_RDONLY | NOFOLLOW)
                try:
                    _digest_fd(kept, digest, offset)
                finally:
                    os.close(kept)
        fd = os.open(full, flags, 0o644)
        try:
            os.ftruncate(fd, offset)
            os.lseek(fd, offset, 0)
            left = length
            while left:
                data = stream.read(min(CHUNK, left))
                if not data:
                    done = length - left
                    raise Bad(f"{rel}: stream ended after {done} of {length} bytes")
                if guard is not None:
                    guard.take(len(data))
                write_past_end(fd, data)  # a sparse file stays sparse here
                if digest is not None:
                    digest.update(data)
                left -= len(data)
                total += len(data)
                if progress is not None:
                    progress(len(data))
            end_at(fd, offset + length)
            os.fchmod(fd, 0o755 if head.get("x") else 0o644)
        finally:
            os.close(fd)
        files += 1
        if listing is not None and digest is not None:
            listing.append(["f", rel, offset + length, bool(head.get("x")), digest.hexdigest()])


def send(root: str, request: dict, out: IO[bytes]) -> None:
    """Frame the requested files onto out; continue a file where asked if its start
    matches. What changed since the listing into something not to send is skipped (a
    skip frame), a file over `max_size` announced and not read."""
    seen: set = set()
    max_size = request.get("max_size")
    for rel, offset, prefix_sha in request["files"]:
        check(rel)
        try:
            real_parents(root, rel, seen, False)
            st = os.lstat(root + "/" + rel)  # a device or FIFO is never opened...
            problem = entry_problem(mode_kind(st.st_mode), st.st_nlink)
            # ...and O_NONBLOCK: one swapped in after the lstat must not block the open.
            flags = os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK
            fd = -1 if problem else os.open(root + "/" + rel, flags)
        except (OSError, Bad) as exc:
            problem = (exc.strerror if isinstance(exc, OSError) else str(exc)) or "cannot be opened"
        if problem is not None:
            out.write((json.dumps({"p": rel, "skip": problem}) + "\n").encode())
            continue
        try:
            st = os.fstat(fd)
            problem = entry_problem(mode_kind(st.st_mode), st.st_nlink)
            if problem is not None:
                out.write((json.dumps({"p": rel, "skip": problem}) + "\n").encode())
                continue
            size = st.st_size
            if max_size is not None and size > max_size:
                out.write((json.dumps({"p": rel, "over": size}) + "\n").encode())
                continue
            if offset and (offset > size or sha_fd(fd, offset) != prefix_sha):
                offset = 0
            os.lseek(fd, offset, 0)
            head = {"p": rel, "o": offset, "n": size - offset, "x": bool(st.st_mode & 0o100)}
            out.write((json.dumps(head) + "\n").encode())
            left = size - offset
            while left:
                data = os.read(fd, min(CHUNK, left))
                if not data:
                    raise Bad(f"{rel} shrank while being sent")
                out.write(data)
                left -= len(data)
        finally:
            os.close(fd)
    out.write(b'{"end": true}\n')
    out.flush()


def put(target: str, data: bytes) -> None:
    """Write a whole file or nothing: temp file next to it, fsync, rename."""
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    tmp = f"{parent}/.{os.path.basename(target)}.{os.getpid()}.part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)


def main(argv: list[str]) -> None:
    if sys.version_info < (3, 9):  # noqa: UP036 (the site's python3, not ours)
        raise Bad("lumberjack needs python3 >= 3.9 at the site")
    mode, root = argv[0], argv[1]
    if mode == "scan":
        scan(root, json.loads(sys.stdin.read() or "{}"), sys.stdout)
    elif mode == "recv":
        written: list = []
        receive(root, sys.stdin.buffer, listing=written)
        for item in written:
            emit(sys.stdout, item)
    elif mode == "send":
        send(root, json.loads(sys.stdin.read()), sys.stdout.buffer)
    elif mode == "put":
        put(root, sys.stdin.buffer.read())
        os.chmod(root, int(argv[2], 8))
    else:
        raise Bad(f"unknown mode {mode!r}")


def run(argv: list[str]) -> None:
    """The command line: one line on stderr and exit status 3 for what is refused."""
    try:
        main(argv)
    except (Bad, OSError, ValueError, KeyError, TypeError) as exc:
        sys.stderr.write(f"lumberjack-remote: {exc}\n")
        sys.exit(3)


if __name__ == "__main__":
    run(sys.argv[1:])
