"""Moving files between the access point and a site, over one SSH connection.

`SiteConnection(profile)` opens ONE fabric Connection per command (so at most one 2FA
prompt) with the host key checked against the profile's pinned known_hosts (or
~/.ssh/known_hosts) and never auto-accepted. Every step then runs on that connection:

    with SiteConnection(profile) as site:
        root = site.expand(profile.base_dir)          # $VARS and ~ resolved by the site
        site.upload(bundle / "spool", f"{root}/spool", manifest.files, progress=True)

Transfers are resumable and batched. A small helper (`_HELPER`, plain python3 >= 3.9, no
other dependency at the site) runs at the other end:

- `scan`: one command lists size + sha256 (+ kind, executable bit) of the files there;
- the plan sends only missing or changed files; a file cut short by an interrupted run
  whose bytes so far match is continued from where it stopped, otherwise resent whole;
- the files go as ONE framed stream (a JSON header line, then the bytes, per file)
  through one exec channel, so 10,000 small files cost no 10,000 round trips;
- after sending, one more `scan` checks every sha256 against the manifest.

Downloads run the same helper the other way round; the site is not trusted, so symlinks,
special files and unsafe names in what it lists are refused.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import shlex
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import click
import paramiko
from fabric import Connection

from lumberjack.ap.bundle import FileEntry, check_relative
from lumberjack.core.safe import REMOTE_PATH
from lumberjack.errors import BadInput, RemoteError
from lumberjack.profiles.sites import SiteProfile

CHUNK = 256 * 1024  # bytes per read/send: big enough to keep the channel busy
CONNECT_TIMEOUT = 20
# Remote paths we let the site's shell expand: the characters a site profile may use.
_EXPANDABLE = REMOTE_PATH
# What an expanded path may not hold: it is quoted into later commands.
_BAD_RESULT = re.compile(r"[\x00-\x1f\x7f'\"`\\]")

# The program run at the other end (python3 >= 3.9, stdlib only). Also exec'd locally to
# receive downloads, so both directions share one receiver.
_HELPER = r'''
import fnmatch, hashlib, json, os, stat, sys

CHUNK = 1 << 20
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class Bad(Exception):
    pass


def check(rel):
    """A path below the root: no absolute path, no '..', no control characters."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or len(rel) > 4096:
        raise Bad("unsafe path %r" % (rel,))
    if any(p in ("", ".", "..") for p in rel.split("/")):
        raise Bad("unsafe path %r" % (rel,))
    if any(ord(c) < 32 or ord(c) == 127 for c in rel):
        raise Bad("unsafe path %r" % (rel,))
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        raise Bad("unsafe path %r (not UTF-8)" % (rel,)) from None
    return rel


def sha_fd(fd, limit=None):
    digest = hashlib.sha256()
    left = limit
    while left is None or left > 0:
        data = os.read(fd, CHUNK if left is None else min(CHUNK, left))
        if not data:
            break
        digest.update(data)
        if left is not None:
            left -= len(data)
    return digest.hexdigest()


def real_parents(root, rel, seen, create):
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
            raise Bad("%s is not a directory (symlink or file in the way)" % current)
        seen.add(current)


def kind_of(mode):
    if stat.S_ISREG(mode):
        return "f"
    if stat.S_ISLNK(mode):
        return "l"
    if stat.S_ISDIR(mode):
        return "d"
    return "o"


def describe(full, rel, want_size=None):
    try:
        st = os.lstat(full)
    except (FileNotFoundError, NotADirectoryError):
        return None
    kind = kind_of(st.st_mode)
    sha = None
    # A file longer than wanted is wrong anyway: no need to read it.
    if kind == "f" and (want_size is None or st.st_size <= want_size):
        fd = os.open(full, os.O_RDONLY | NOFOLLOW)
        try:
            sha = sha_fd(fd)
        finally:
            os.close(fd)
    return [kind, rel, st.st_size, bool(st.st_mode & 0o100), sha]


def excluded(rel, patterns):
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        if any(fnmatch.fnmatchcase(prefix, p) for p in patterns):
            return True
    return False


def emit(out, item):
    out.write(json.dumps(item) + "\n")


def scan(root, request, out):
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
    if not os.path.isdir(root) or os.path.islink(root):
        raise Bad("%s is not a directory" % root)
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
                item = describe(entry.path, rel)
                if item is not None:
                    emit(out, item)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def receive(root, stream, progress=None):
    """Write the framed stream's files below root; return (files, bytes)."""
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
        rel = check(head["p"])
        offset, length = int(head["o"]), int(head["n"])
        if offset < 0 or length < 0:
            raise Bad("%s: bad header" % rel)
        real_parents(root, rel, seen, True)
        full = root + "/" + rel
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise Bad("%s is a directory" % full)
        if st is not None and not stat.S_ISREG(st.st_mode):
            os.unlink(full)  # a symlink or special file where a file goes: replace it
            st = None
        if offset and (st is None or st.st_size < offset):
            raise Bad("%s: cannot continue at byte %d" % (rel, offset))
        flags = os.O_WRONLY | os.O_CREAT | NOFOLLOW | (0 if offset else os.O_TRUNC)
        fd = os.open(full, flags, 0o644)
        try:
            os.ftruncate(fd, offset)
            os.lseek(fd, offset, 0)
            left = length
            while left:
                data = stream.read(min(CHUNK, left))
                if not data:
                    done = length - left
                    raise Bad("%s: stream ended after %d of %d bytes" % (rel, done, length))
                write_all(fd, data)
                left -= len(data)
                total += len(data)
                if progress is not None:
                    progress(len(data))
            os.fchmod(fd, 0o755 if head.get("x") else 0o644)
        finally:
            os.close(fd)
        files += 1


def send(root, request, out):
    """Frame the requested files onto out; continue a file where asked if its start matches."""
    seen = set()
    for rel, offset, prefix_sha in request["files"]:
        check(rel)
        real_parents(root, rel, seen, False)
        try:
            fd = os.open(root + "/" + rel, os.O_RDONLY | NOFOLLOW)
        except OSError as exc:
            raise Bad("%s: %s" % (rel, exc.strerror)) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Bad("%s is not a regular file" % rel)
            size = st.st_size
            if offset and (offset > size or sha_fd(fd, offset) != prefix_sha):
                offset = 0
            os.lseek(fd, offset, 0)
            head = {"p": rel, "o": offset, "n": size - offset, "x": bool(st.st_mode & 0o100)}
            out.write((json.dumps(head) + "\n").encode())
            left = size - offset
            while left:
                data = os.read(fd, min(CHUNK, left))
                if not data:
                    raise Bad("%s shrank while being sent" % rel)
                out.write(data)
                left -= len(data)
        finally:
            os.close(fd)
    out.write(b'{"end": true}\n')
    out.flush()


def put(target, data):
    """Write a whole file or nothing: temp file next to it, fsync, rename."""
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    tmp = "%s/.%s.%d.part" % (parent, os.path.basename(target), os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)


def main(argv):
    if sys.version_info < (3, 9):
        raise Bad("lumberjack needs python3 >= 3.9 at the site")
    mode, root = argv[0], argv[1]
    if mode == "scan":
        scan(root, json.loads(sys.stdin.read() or "{}"), sys.stdout)
    elif mode == "recv":
        files, total = receive(root, sys.stdin.buffer)
        print(json.dumps({"files": files, "bytes": total}))
    elif mode == "send":
        send(root, json.loads(sys.stdin.read()), sys.stdout.buffer)
    elif mode == "put":
        put(root, sys.stdin.buffer.read())
        os.chmod(root, int(argv[2], 8))
    else:
        raise Bad("unknown mode %r" % mode)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except (Bad, OSError, ValueError, KeyError, TypeError) as exc:
        sys.stderr.write("lumberjack-remote: %s\n" % (exc,))
        sys.exit(3)
'''
_HELPER_B64 = base64.b64encode(zlib.compress(_HELPER.encode(), 9)).decode()
_HELPER_MAIN = f"import base64,zlib;exec(zlib.decompress(base64.b64decode('{_HELPER_B64}')))"
_HELPER_NAMESPACE: dict[str, Any] = {}


def helper_command(mode: str, *args: str) -> str:
    """The remote command line running the helper (no newline in it: any login shell)."""
    return shlex.join(["python3", "-c", _HELPER_MAIN, mode, *args])


def helper() -> dict[str, Any]:
    """The helper's functions, for the local end of a download (and for the tests)."""
    if not _HELPER_NAMESPACE:
        _HELPER_NAMESPACE["__name__"] = "lumberjack_transport_helper"
        exec(compile(_HELPER, "<lumberjack transport helper>", "exec"), _HELPER_NAMESPACE)
    return _HELPER_NAMESPACE


# ---- pure parts: listings and plans --------------------------------------------------


@dataclass(frozen=True)
class FileState:
    """What one end holds at a path: kind f(ile), l(ink), d(ir), o(ther)."""

    path: str
    kind: str
    size: int
    executable: bool
    sha256: str | None


@dataclass(frozen=True)
class Step:
    """Send `path` from byte `offset` (0: whole file; == size: only fix the mode)."""

    path: str
    offset: int
    size: int
    executable: bool
    sha256: str

    @property
    def length(self) -> int:
        return self.size - self.offset


@dataclass
class TransferReport:
    sent_files: int = 0
    sent_bytes: int = 0
    skipped_files: int = 0
    skipped_bytes: int = 0
    seconds: float = 0.0
    resumed_files: int = 0  # sent from where an interrupted run stopped

    def summary(self) -> str:
        mib = self.sent_bytes / (1 << 20)
        rate = mib / self.seconds if self.seconds else 0.0
        return (
            f"sent {self.sent_files} files ({mib:.1f} MiB, {rate:.1f} MiB/s), "
            f"{self.skipped_files} already there"
        )


_SHA = re.compile(r"^[0-9a-f]{64}$")


def parse_listing(text: str, source: str) -> dict[str, FileState]:
    """The helper's scan output (JSON lines) as FileStates; RemoteError on anything odd."""
    states: dict[str, FileState] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            kind, path, size, executable, sha = json.loads(line)
            ok = (
                kind in ("f", "l", "d", "o")
                and isinstance(path, str)
                and isinstance(size, int)
                and size >= 0
                and isinstance(executable, bool)
                and (sha is None or (isinstance(sha, str) and _SHA.match(sha)))
            )
        except (ValueError, TypeError):
            ok = False
        if not ok:
            raise RemoteError(f"{source}: unreadable listing line {number}: {line[:80]!r}")
        states[path] = FileState(path, kind, size, executable, sha)
    return states


def check_site_path(path: str, source: str) -> str:
    """Refuse a name from the site that could escape the root or confuse a terminal."""
    try:
        check_relative(path, source)
        helper()["check"](path)
    except (BadInput, helper()["Bad"]):
        raise RemoteError(f"{source}: refusing unsafe file name {path!r}") from None
    return path


def check_download_listing(states: dict[str, FileState], source: str) -> list[FileEntry]:
    """The site's files as entries to fetch; RemoteError on a symlink, special file or
    unsafe name (the site is not trusted)."""
    entries = []
    for path, state in sorted(states.items()):
        check_site_path(path, source)
        if state.kind == "l":
            raise RemoteError(
                f"{source}: {path!r} is a symlink; lumberjack fetches regular files only"
            )
        if state.kind != "f" or state.sha256 is None:
            raise RemoteError(f"{source}: {path!r} is not a regular file; refusing it")
        entries.append(FileEntry(path, state.size, state.sha256, state.executable))
    return entries


def plan(
    wanted: Iterable[FileEntry],
    have: dict[str, FileState],
    prefix_sha: Callable[[str, int], str] | None = None,
) -> tuple[list[Step], list[FileEntry]]:
    """What to send so that `have` matches `wanted`: (steps, entries already right).

    A file shorter than wanted whose bytes so far match is continued, not resent:
    `prefix_sha(path, n)` hashes the first n bytes at the sending end; without it the
    sender checks (it gets the receiver's sha256 and restarts at 0 on a mismatch).
    """
    steps: list[Step] = []
    done: list[FileEntry] = []
    for entry in wanted:
        state = have.get(entry.path)
        offset = 0
        if state is not None and state.kind == "f" and state.sha256 is not None:
            if state.size == entry.size and state.sha256 == entry.sha256:
                if state.executable == entry.executable:
                    done.append(entry)
                    continue
                offset = entry.size  # right bytes, wrong mode: a zero-length step fixes it
            elif 0 < state.size < entry.size and (
                prefix_sha is None or prefix_sha(entry.path, state.size) == state.sha256
            ):
                offset = state.size
        steps.append(Step(entry.path, offset, entry.size, entry.executable, entry.sha256))
    return steps, done


def verify_states(
    wanted: Iterable[FileEntry], have: dict[str, FileState], check_mode: bool = True
) -> list[str]:
    """Every file of `wanted` that `have` does not hold exactly (empty: all good)."""
    problems = []
    for entry in wanted:
        state = have.get(entry.path)
        if state is None or state.kind != "f":
            problems.append(f"{entry.path}: missing")
        elif state.size != entry.size:
            problems.append(f"{entry.path}: size {state.size} != {entry.size}")
        elif state.sha256 != entry.sha256:
            problems.append(f"{entry.path}: sha256 mismatch")
        elif check_mode and state.executable != entry.executable:
            problems.append(f"{entry.path}: executable bit differs")
    return problems


def local_states(root: Path, paths: Iterable[str], sizes: dict[str, int]) -> dict[str, FileState]:
    """The local end's FileStates for `paths` below root (hashing files no longer than wanted)."""
    scan = io.StringIO()
    helper()["scan"](str(root), {"want": {p: sizes[p] for p in paths}}, scan)
    return parse_listing(scan.getvalue(), str(root))


# ---- the connection ------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    command: str
    stdout: str
    stderr: str
    exited: int

    @property
    def ok(self) -> bool:
        return self.exited == 0


class _Progress:
    """A click progress bar on bytes (stderr), or nothing."""

    def __init__(self, total: int, label: str, show: bool, force: bool) -> None:
        self.bar: Any = None
        if show and total and (force or sys.stderr.isatty()):
            self.bar = click.progressbar(length=total, label=label, file=sys.stderr)
            self.bar.is_hidden = False  # click hides it off a tty; `force` wants it anyway
            self.bar.__enter__()

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


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


class _Transport(paramiko.Transport):
    """paramiko computes HMACs in Python per 32 KiB packet; with AES-GCM (an AEAD cipher,
    no separate MAC) a channel moves about twice the bytes per second. Same ciphers
    offered, GCM first."""

    _preferred_ciphers = tuple(
        sorted(paramiko.Transport._preferred_ciphers, key=lambda name: "-gcm@" not in name)
    )


class SiteConnection:
    """One SSH connection to a site's login node, for every step of one command."""

    def __init__(self, profile: SiteProfile, *, connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.profile = profile
        self.connect_timeout = connect_timeout
        self.address = f"{profile.login_host}:{profile.port}"
        self._conn: Connection | None = None
        self._expanded: dict[str, str] = {}

    # -- opening and closing

    def __enter__(self) -> SiteConnection:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def known_hosts(self) -> Path:
        return self.profile.known_hosts_path() or Path("~/.ssh/known_hosts").expanduser()

    def open(self) -> None:
        if self._conn is not None:
            return
        profile = self.profile
        connect_kwargs: dict[str, Any] = {"transport_factory": _Transport}
        identity = profile.identity_file_path()
        if identity is not None:
            if not identity.is_file():
                raise BadInput(
                    f"site {profile.name}: identity_file {identity} does not exist; "
                    "fix [site].identity_file in its profile"
                )
            # The profile names the key: use that one only, as the site expects.
            connect_kwargs |= {
                "key_filename": [str(identity)],
                "look_for_keys": False,
                "allow_agent": False,
            }
        conn = Connection(
            profile.login_host,
            user=profile.user,
            port=profile.port,
            connect_timeout=int(self.connect_timeout),
            connect_kwargs=connect_kwargs,
        )
        # Fabric auto-adds unknown host keys; ours are pinned and never accepted blindly.
        known_hosts = self.known_hosts()
        if known_hosts.is_file():
            try:
                conn.client.get_host_keys().load(str(known_hosts))
            except (OSError, paramiko.SSHException) as exc:
                raise BadInput(f"{known_hosts}: unreadable known_hosts file ({exc})") from exc
        conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            conn.open()
        except BaseException as exc:
            conn.close()
            raise self._connect_error(exc, known_hosts) from exc
        transport = conn.client.get_transport()
        if transport is not None:
            transport.set_keepalive(30)
        self._conn = conn

    def _host_key_name(self) -> str:
        host, port = self.profile.login_host, self.profile.port
        return host if port == 22 else f"[{host}]:{port}"

    def _connect_error(self, exc: BaseException, known_hosts: Path) -> BaseException:
        host, port = self.profile.login_host, self.profile.port
        name = self._host_key_name()
        keyscan = f"ssh-keyscan {'-p ' + str(port) + ' ' if port != 22 else ''}{host}"
        verify = (
            f"then check its fingerprint (ssh-keygen -lf {known_hosts}) against the one "
            "the site publishes"
        )
        where = f"{self.profile.user + '@' if self.profile.user else ''}{self.address}"
        if isinstance(exc, paramiko.BadHostKeyException):
            return RemoteError(
                f"host key of {name} does not match {known_hosts}: the site changed its key "
                f"or someone is in the way; if the site announced a new key, run "
                f"ssh-keygen -R '{name}' -f {known_hosts} && {keyscan} >> {known_hosts}, {verify}"
            )
        if isinstance(exc, paramiko.AuthenticationException):
            return RemoteError(f"cannot log in to {where}: authentication failed ({exc})")
        if isinstance(exc, paramiko.SSHException) and "known_hosts" in str(exc):
            return RemoteError(
                f"host key of {name} is not in {known_hosts}; add it with "
                f"{keyscan} >> {known_hosts}, {verify}"
            )
        if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
            return RemoteError(f"cannot connect to {self.address}: connection refused")
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return RemoteError(
                f"cannot connect to {self.address}: no answer in {self.connect_timeout:g} s"
            )
        if isinstance(exc, socket.gaierror):
            return RemoteError(f"cannot connect to {self.address}: unknown host name ({exc})")
        if isinstance(exc, (OSError, paramiko.SSHException, EOFError)):
            return RemoteError(f"cannot connect to {self.address}: {_one_line(str(exc))}")
        return exc

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _transport(self) -> paramiko.Transport:
        if self._conn is None:
            self.open()
        assert self._conn is not None
        transport = self._conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise RemoteError(f"connection to {self.address} was closed")
        return transport

    # -- commands

    def _exec(
        self,
        command: str,
        *,
        feed: Callable[[Callable[[bytes], Any]], None] | None = None,
        consume: Callable[[IO[bytes]], None] | None = None,
        timeout: float | None = None,
    ) -> RunResult:
        """Run `command` on a fresh channel of the one connection.

        `feed(send)` writes its stdin from a thread (stdin is then closed); `consume(stream)`
        reads its stdout as a stream; otherwise stdout is collected.
        """
        try:
            channel = self._transport().open_session(timeout=timeout)
        except paramiko.SSHException as exc:
            raise RemoteError(f"{self.address}: cannot open a channel ({exc})") from exc
        channel.settimeout(timeout)
        failures: list[BaseException] = []
        errors = bytearray()

        def feeder() -> None:
            try:
                if feed is not None:
                    feed(channel.sendall)
                channel.shutdown_write()
            except BaseException as exc:  # re-raised in the calling thread
                failures.append(exc)
                channel.close()  # the other end must not wait for more input

        def drain_stderr() -> None:
            try:
                while True:
                    data = channel.recv_stderr(CHUNK)
                    if not data:
                        return
                    errors.extend(data)
            except (OSError, EOFError):  # channel closed under us: the main thread reports it
                return

        try:
            channel.exec_command(command)
            threads = [
                threading.Thread(target=feeder, daemon=True),
                threading.Thread(target=drain_stderr, daemon=True),
            ]
            for thread in threads:
                thread.start()
            stdout = b""
            if consume is not None:
                with channel.makefile("rb", CHUNK) as stream:
                    consume(stream)
            else:
                chunks = []
                while data := channel.recv(CHUNK):
                    chunks.append(data)
                stdout = b"".join(chunks)
            for thread in threads:
                thread.join(timeout)
            exited = _exit_status(channel)
        except socket.timeout as exc:
            raise RemoteError(
                f"{self.address}: no answer within {timeout:g} s from: {_short(command)}"
            ) from exc
        finally:
            channel.close()
        if exited is None:
            raise failures[0] if failures else EOFError("connection closed")
        if failures and exited == 0:
            raise failures[0]
        # A failed command explains itself (stderr) better than the broken pipe it left.
        return RunResult(
            command,
            stdout.decode("utf-8", "replace"),
            errors.decode("utf-8", "replace"),
            exited,
        )

    def run(
        self,
        command: str,
        *,
        check: bool = True,
        stdin: bytes | None = None,
        timeout: float | None = None,
    ) -> RunResult:
        """Run a command at the site quietly; RemoteError (one line) if check and it fails."""
        feed = None
        if stdin is not None:
            data = stdin

            def feed(send: Callable[[bytes], Any]) -> None:
                for start in range(0, len(data), CHUNK):
                    send(data[start : start + CHUNK])

        try:
            result = self._exec(command, feed=feed, timeout=timeout)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise RemoteError(f"{self.address}: connection lost during {_short(command)}") from exc
        if check and not result.ok:
            raise RemoteError(_failure(self.address, command, result))
        return result

    def put_bytes(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        """Write a whole remote file or nothing (temp file, fsync, rename)."""
        target = self.expand(remote_path)
        self.run(helper_command("put", target, f"{mode:o}"), stdin=data)

    def expand(self, path: str) -> str:
        """`path` with $VARS and ~ resolved by the site's shell (an unset variable is an
        error); the result is absolute and holds no quotes or newlines."""
        if path in self._expanded:
            return self._expanded[path]
        if not _EXPANDABLE.match(path):
            raise BadInput(
                f"remote path {path!r} has characters lumberjack does not pass to a shell; "
                "use letters, digits and _ . / $ { } ~ @ : + , = -"
            )
        if "$" not in path and "~" not in path:
            result = path
        else:
            # sh -u: an unset $VAR is an error, not an empty string that lands in /.
            inner = f"set -u; printf %s {path}"
            answer = self.run(f"/bin/sh -c {shlex.quote(inner)}", check=False, timeout=60)
            if not answer.ok:
                raise RemoteError(
                    f"site {self.address} cannot expand {path}: {_last_line(answer.stderr)}"
                )
            result = answer.stdout
        if not result.startswith("/") or _BAD_RESULT.search(result):
            raise RemoteError(f"site {self.address} expanded {path} to {result!r}; refusing it")
        result = result.rstrip("/") or "/"
        self._expanded[path] = result
        return result

    def home(self) -> str:
        return self.expand("$HOME")

    def _helper(
        self,
        mode: str,
        root: str,
        *,
        feed: Callable[[Callable[[bytes], Any]], None] | None = None,
        consume: Callable[[IO[bytes]], None] | None = None,
        what: str,
    ) -> RunResult:
        command = helper_command(mode, root)
        try:
            result = self._exec(command, feed=feed, consume=consume)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise RemoteError(
                f"connection to {self.address} lost during {what}; run the same command "
                f"again to resume ({_one_line(str(exc)) or type(exc).__name__})"
            ) from exc
        if result.exited == 127 or (not result.ok and "python3: " in result.stderr):
            raise RemoteError(
                f"site {self.address} has no python3 on PATH; lumberjack needs python3 >= 3.9 "
                "there (load it in the login shell's startup file)"
            )
        if not result.ok:
            raise RemoteError(
                f"site {self.address}: {what} in {root} failed: {_last_line(result.stderr)}"
            )
        return result

    def scan(
        self,
        remote_root: str,
        want: dict[str, int] | None = None,
        exclude: Sequence[str] = (),
    ) -> dict[str, FileState]:
        """Kind, size, sha256 and mode of the files below remote_root: the paths in `want`
        only (sha256 read for files no longer than wanted), or every file but excluded ones."""
        request = json.dumps({"want": want, "exclude": list(exclude)}).encode()
        result = self._helper(
            "scan", remote_root, feed=lambda send: send(request), what="listing the files"
        )
        return parse_listing(result.stdout, f"site {self.address}")

    # -- transfers

    def upload(
        self,
        local_root: Path,
        remote_root: str,
        files: list[FileEntry],
        *,
        progress: bool = False,
        force_progress: bool = False,
        on_bytes: Callable[[int], None] | None = None,
    ) -> TransferReport:
        """Make remote_root hold `files` (from local_root) exactly; send only what is
        missing or changed, then check every sha256 at the site."""
        started = time.monotonic()
        local_root = Path(local_root)
        for entry in files:
            check_relative(entry.path, "manifest")
        root = self.expand(remote_root)
        wanted = {entry.path: entry.size for entry in files}
        have = self.scan(root, want=wanted)

        def prefix_sha(path: str, length: int) -> str:
            with open(local_root / path, "rb") as handle:
                return _sha_prefix(handle, length).hexdigest()

        steps, done = plan(files, have, prefix_sha)
        for step in steps:  # cheap: catch a changed bundle before sending anything
            source = local_root / step.path
            if not source.is_file() or source.stat().st_size != step.size:
                raise BadInput(f"{source}: missing or changed since the manifest was written")
        report = _report(steps, done)
        total = sum(step.length for step in steps)
        bar = _Progress(total, "uploading", progress, force_progress)

        def feed(send: Callable[[bytes], Any]) -> None:
            out = _Batched(send)
            for step in steps:
                _send_file(out, local_root, step, bar, on_bytes)
            out.write(b'{"end": true}\n')
            out.flush()

        try:
            if steps:
                self._helper("recv", root, feed=feed, what="upload")
        finally:
            bar.close()
        if steps:
            problems = verify_states(files, self.scan(root, want=wanted))
            if problems:
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                raise RemoteError(
                    f"site {self.address}: after upload {root}/{problems[0]}{more}; run again "
                    "to resend"
                )
        report.seconds = time.monotonic() - started
        return report

    def download(
        self,
        remote_root: str,
        local_root: Path,
        *,
        progress: bool = False,
        exclude: Sequence[str] = (),
        force_progress: bool = False,
        on_bytes: Callable[[int], None] | None = None,
    ) -> TransferReport:
        """Make local_root hold the regular files below remote_root (but `exclude` globs,
        matched against relative paths and their parent directories); fetch only what is
        missing or changed and check every sha256 on arrival."""
        started = time.monotonic()
        local_root = Path(local_root)
        root = self.expand(remote_root)
        source = f"site {self.address}: {root}"
        listing = self.scan(root, exclude=exclude)
        wanted = check_download_listing(listing, source)
        helper_ns = helper()
        if any(helper_ns["excluded"](entry.path, list(exclude)) for entry in wanted):
            raise RemoteError(f"{source}: listing holds excluded files; refusing it")
        local_root.mkdir(parents=True, exist_ok=True)
        sizes = {entry.path: entry.size for entry in wanted}
        have = local_states(local_root, sizes, sizes)
        steps, done = plan(wanted, have)  # the site checks our partial files' sha256
        report = _report(steps, done)
        bar = _Progress(sum(s.length for s in steps), "downloading", progress, force_progress)
        request = json.dumps(
            {"files": [[s.path, s.offset, _state_sha(have, s)] for s in steps]}
        ).encode()
        received: list[int] = [0]

        def count(n: int) -> None:
            received[0] += n
            bar.update(n)
            if on_bytes is not None:
                on_bytes(n)

        refused: list[str] = []

        def consume(stream: IO[bytes]) -> None:
            try:
                helper_ns["receive"](str(local_root), stream, count)
            except (helper_ns["Bad"], ValueError, KeyError, OSError) as exc:
                refused.append(str(exc))
                # Read to the end: the site's own error (if any) explains it better.
                while stream.read(CHUNK):
                    pass

        try:
            if steps:
                self._helper(
                    "send", root, feed=lambda send: send(request), consume=consume,
                    what="download",
                )  # fmt: skip
        finally:
            bar.close()
        if refused:
            raise RemoteError(f"{source}: download refused: {_one_line(refused[0])}")
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


# ---- helpers ---------------------------------------------------------------------------


def _exit_status(channel: paramiko.Channel) -> int | None:
    """The command's exit status; None when the channel closed without one (connection
    lost): paramiko's recv_exit_status() would wait forever then."""
    while not channel.status_event.wait(0.1):
        if channel.closed or not channel.get_transport().is_active():
            break
    # paramiko also sets the event when the channel closes, leaving exit_status at -1.
    if channel.exit_status == -1 and not channel.get_transport().is_active():
        return None
    return channel.exit_status


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


def _send_file(
    out: _Batched,
    local_root: Path,
    step: Step,
    bar: _Progress,
    on_bytes: Callable[[int], None] | None,
) -> None:
    """Frame one file onto the stream, hashing it on the way against the manifest."""
    head = {"p": step.path, "o": step.offset, "n": step.length, "x": step.executable}
    out.write((json.dumps(head) + "\n").encode())
    with open(local_root / step.path, "rb") as handle:
        digest = _sha_prefix(handle, step.offset)
        left = step.length
        while left:
            data = handle.read(min(CHUNK, left))
            if not data:
                raise BadInput(f"{local_root / step.path}: shrank while being sent")
            digest.update(data)
            out.write(data)
            left -= len(data)
            bar.update(len(data))
            if on_bytes is not None:
                on_bytes(len(data))
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


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "no error message")[:300]


def _short(command: str) -> str:
    if _HELPER_MAIN in command:
        command = command.replace(shlex.quote(_HELPER_MAIN), "<helper>")
    return command if len(command) <= 80 else command[:77] + "..."


def _failure(address: str, command: str, result: RunResult) -> str:
    return f"site {address}: `{_short(command)}` failed (exit {result.exited}): " + _last_line(
        result.stderr
    )


__all__ = [
    "FileState",
    "RunResult",
    "SiteConnection",
    "Step",
    "TransferReport",
    "check_download_listing",
    "parse_listing",
    "plan",
    "verify_states",
]
