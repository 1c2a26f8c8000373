"""What can be wrong with the state directory and its ledger, said in one line that names
the path and what to do (StateError, exit 6; Busy, exit 4, for a ledger another process
holds locked). The ledger's own queries go through `Guarded`, so a disk that fills or a
file that is damaged later in a command ends the same way."""

from __future__ import annotations

import errno
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from lumberjack.errors import Busy, LumberjackError, StateError

#: Below this much free space the ledger is not opened: a step recorded half-way is worse
#: than a step refused (the ledger's writes are small; this leaves room for its journal).
MIN_FREE_BYTES = 1 << 20

#: How long a command waits for another process's write to the ledger ("database is
#: locked"); $LUMBERJACK_LEDGER_WAIT seconds overrides it.
DEFAULT_WAIT_S = 30.0

_ELSEWHERE = "or set LUMBERJACK_STATE_DIR to another directory"


def ledger_wait_s() -> float:
    text = os.environ.get("LUMBERJACK_LEDGER_WAIT", "")
    try:
        return max(0.0, float(text)) if text else DEFAULT_WAIT_S
    except ValueError:
        raise StateError(f"LUMBERJACK_LEDGER_WAIT={text!r} is not a number of seconds") from None


def usable_state_dir(directory: Path) -> None:
    """Create the state directory if missing; StateError when it cannot hold a ledger."""
    if os.path.lexists(directory) and not directory.is_dir():
        what = "a file, not a directory" if directory.is_file() else "not a directory"
        raise StateError(f"state directory {directory} is {what}; move it aside {_ELSEWHERE}")
    try:
        # 0711: the schedd writes an export's queue into the bundle as the job's owner,
        # who may not be the account running lumberjack (root on an access point).
        directory.mkdir(parents=True, exist_ok=True, mode=0o711)
    except OSError as exc:
        raise StateError(
            f"cannot create the state directory {directory}: {exc.strerror}; create it {_ELSEWHERE}"
        ) from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StateError(f"state directory {directory} is {_unwritable(directory)}")
    fs = os.statvfs(directory)
    if fs.f_bavail * fs.f_frsize < MIN_FREE_BYTES:
        raise StateError(_full(directory))


def check_undamaged(ledger: Path, tries: int = 3) -> None:
    """sqlite3.DatabaseError when the ledger's file is not an intact SQLite database,
    found before it is opened for use: that open would create its -wal and -shm files.
    Read as immutable (no locks, no files made); a page torn by another process's
    checkpoint fails once, damage fails every time."""
    uri = f"{ledger.absolute().as_uri()}?immutable=1"
    for attempt in range(tries):
        db = sqlite3.connect(uri, uri=True)
        try:
            answer = db.execute("PRAGMA quick_check(1)").fetchone()
            if answer and answer[0] == "ok":
                return
            problem: sqlite3.Error = sqlite3.DatabaseError(
                f"database disk image is malformed: {answer[0]}"
            )
        except sqlite3.DatabaseError as exc:
            problem = exc
        finally:
            db.close()
        if attempt + 1 < tries:
            time.sleep(0.05)
    raise problem


def state_problem(exc: BaseException, ledger: Path) -> LumberjackError:
    """The one-line error for `exc`, raised while opening or using `ledger`."""
    if isinstance(exc, LumberjackError):
        return exc
    said = " ".join(str(exc).split())  # SQLite's messages may span lines; ours never do
    if isinstance(exc, OSError):
        where = Path(exc.filename) if exc.filename else ledger
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return StateError(_full(where))
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return StateError(f"{where} is {_unwritable(where)}")
        return StateError(f"{where}: {exc.strerror or said}; check it {_ELSEWHERE}")
    text = said.lower()
    if "locked" in text or "busy" in text:
        return Busy(f"ledger {ledger} is locked by another process; try again later")
    if "full" in text:
        return StateError(_full(ledger))
    if "readonly" in text or "read-only" in text:
        return StateError(f"ledger {ledger} is {_unwritable(ledger)}")
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return StateError(
            f"ledger {ledger} is damaged ({said}); restore it from a backup, or move it "
            "aside and lumberjack starts an empty one"
        )
    return StateError(f"ledger {ledger}: {said}; check its file system {_ELSEWHERE}")


def _unwritable(path: Path) -> str:
    try:
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return f"on a read-only file system; remount it writable {_ELSEWHERE}"
    return f"not writable by this account; give it write permission (chmod u+w) {_ELSEWHERE}"


def _full(path: Path) -> str:
    return f"no space left for the ledger at {path}; free space on its file system {_ELSEWHERE}"


class Rows:
    """A query's rows, all read at once (a damaged page then fails inside `Guarded`)."""

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return self._rows


class Guarded:
    """A SQLite connection whose failures become `state_problem`s (IntegrityError stays:
    callers turn a taken name into their own message)."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self._db = db
        self.path = path

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Rows:
        try:
            return Rows(self._db.execute(sql, params).fetchall())
        except sqlite3.IntegrityError:
            raise
        except (sqlite3.Error, OSError) as exc:
            raise state_problem(exc, self.path) from None

    def close(self) -> None:
        self._db.close()
