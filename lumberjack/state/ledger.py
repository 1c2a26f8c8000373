"""The ledger: every export, its phase, its jobs and every step taken, in SQLite.

An export's phase changes only by the moves in the table of phases.py (`move`); a
lease's (see leases.py) by LEASE_MOVES there. An export that joined a lease names it in
its info ("lease"), so the lease's exports are found from the exports themselves.

Steps are recorded before they act ("started") and after ("done"), so a command that
crashed mid-step can be found and finished or rolled back by the next `sync`.
The database lives in $LUMBERJACK_STATE_DIR (default: the XDG state dir).
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lumberjack.ap.names import check_name
from lumberjack.errors import BadInput, Busy, StateError
from lumberjack.host.identity import user_writable_level
from lumberjack.host.state_home import state_dir
from lumberjack.state.ledger_guard import (
    Guarded,
    check_undamaged,
    ledger_wait_s,
    state_problem,
    usable_state_dir,
)
from lumberjack.state.phases import LeasePhase, Phase, check, ends, lease_move

SCHEMA = """
CREATE TABLE IF NOT EXISTS exports (
    name TEXT PRIMARY KEY,
    site TEXT,
    phase TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    bundle_dir TEXT NOT NULL,
    remote_spool TEXT NOT NULL,
    owner TEXT,
    clusters TEXT NOT NULL,
    jobs TEXT NOT NULL,
    info TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    export TEXT NOT NULL REFERENCES exports(name),
    step TEXT NOT NULL,
    status TEXT NOT NULL,
    time REAL NOT NULL,
    message TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    site TEXT NOT NULL,
    phase TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    info TEXT NOT NULL DEFAULT '{}'
);
"""


def check_root_owned(path: Path) -> None:
    """Root keeps its state only where no other user can write, at every level."""
    if os.geteuid() != 0:
        return
    found = user_writable_level(path)
    if found is not None:
        level, how = found
        where = path if level == path.absolute() else f"{path}: {level}"
        raise StateError(
            f"state directory {where} {how}; root keeps its state only where no "
            "user can write (set LUMBERJACK_STATE_DIR)"
        )


@dataclass
class ExportRecord:
    name: str
    site: str | None
    phase: Phase
    created: float
    updated: float
    bundle_dir: Path
    remote_spool: str
    owner: str | None
    clusters: list[int]
    jobs: list[str]
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "site": self.site,
            "phase": self.phase.value,
            "created": self.created,
            "updated": self.updated,
            "bundle_dir": str(self.bundle_dir),
            "remote_spool": self.remote_spool,
            "owner": self.owner,
            "clusters": self.clusters,
            "jobs": self.jobs,
            "info": self.info,
        }


def lease_key(name: str) -> str:
    """A lease's name among the ledger's steps and locks: never an export's (export names
    hold no colon), so a lease and an export of the same name never meet."""
    return f"lease:{name}"


@dataclass
class LeaseRecord:
    name: str
    site: str
    phase: LeasePhase
    created: float
    updated: float
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "site": self.site, "phase": self.phase.value,
                "created": self.created, "updated": self.updated, "info": self.info,
                "owner": self.owner, "share_with": self.share_with}  # fmt: skip

    @property
    def owner(self) -> str | None:
        """Who created it (root: for whom); None for a lease recorded before owners."""
        return self.info.get("owner")

    @property
    def share_with(self) -> list[str]:
        return list(self.info.get("share_with", []))

    def check_may_join(self, owners: list[str]) -> None:
        """BadInput, in one line, when jobs of `owners` may not join: only the owner's
        and the share list's may (anyone's, in a lease recorded before owners)."""
        if self.owner is None:
            return
        refused = sorted(set(owners) - {self.owner, *self.share_with})
        if refused:
            shared = ", ".join(self.share_with) or "nobody"
            raise BadInput(
                f"lease {self.name!r} is {self.owner}'s, shared with {shared}: jobs of "
                f"{', '.join(refused)} may not join it (its owner may `lease share "
                f"{self.name} --add {refused[0]}`)"
            )


class Ledger:
    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or state_dir()
        check_root_owned(self.directory)
        self.path = self.directory / "ledger.sqlite"
        try:
            self._db = Guarded(self._open(), self.path)
        except (OSError, sqlite3.Error) as exc:
            raise state_problem(exc, self.path) from None

    def _open(self) -> sqlite3.Connection:
        usable_state_dir(self.directory)
        # Only this account reads the ledger (jobs, paths, sites of every user); SQLite
        # gives its -wal and -shm files the database's mode. Never open and close the
        # file itself once it exists: closing any descriptor of it drops this process's
        # POSIX locks, those of its open SQLite connections too, and a WAL database
        # whose locks vanish loses commits or is corrupted.
        if not self.path.exists():
            try:
                os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                pass
        info = os.stat(self.path)
        if not stat.S_ISREG(info.st_mode):
            raise StateError(f"ledger {self.path} is not a regular file; move it aside")
        if not os.access(self.path, os.R_OK | os.W_OK):
            raise StateError(
                f"ledger {self.path} is read-only; make it writable for this account "
                "(chmod u+rw) or set LUMBERJACK_STATE_DIR"
            )
        if info.st_mode & 0o077:
            os.chmod(self.path, 0o600)
        if info.st_size:
            check_undamaged(self.path)
        db = sqlite3.connect(self.path, timeout=ledger_wait_s(), isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.executescript(SCHEMA)
        except BaseException:
            db.close()
            raise
        return db

    def close(self) -> None:
        self._db.close()

    def bundles_dir(self) -> Path:
        """Where `export --site` writes bundles; traversable (not listable) by others."""
        path = self.directory / "bundles"
        path.mkdir(mode=0o711, exist_ok=True)
        os.chmod(self.directory, os.stat(self.directory).st_mode | 0o111)
        os.chmod(path, 0o711)
        return path

    def work_dir(self, name: str, *, area: str = "work") -> Path:
        """This account's own working state for export `name` (the returned spool, the
        import's journals and the schedd's copy of the queue): never inside the bundle,
        which belongs to the job's owner. Traversable (not listable) by others: the
        schedd opens its copy of the queue as the owner. `area` "offline": for a bundle
        handed in with `import --in`, named by its path."""
        check_name(name)
        work = self.directory / area
        work.mkdir(mode=0o711, exist_ok=True)
        path = work / name
        path.mkdir(mode=0o711, exist_ok=True)
        for level in (self.directory, work, path):
            info = os.lstat(level)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                raise BadInput(f"{level} is not a directory of this account")
            os.chmod(level, (info.st_mode | 0o111) & ~0o022)
        return path

    def create(
        self,
        name: str,
        *,
        site: str | None,
        bundle_dir: Path,
        remote_spool: str,
        owner: str | None,
        clusters: list[int],
        jobs: list[str],
        info: dict[str, Any] | None = None,
    ) -> ExportRecord:
        check_name(name)
        now = time.time()
        try:
            self._db.execute(
                "INSERT INTO exports VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    name, site, Phase.SELECTED, now, now, str(bundle_dir), remote_spool, owner,
                    json.dumps(clusters), json.dumps(jobs), json.dumps(info or {}),
                ),
            )  # fmt: skip
        except sqlite3.IntegrityError as exc:
            raise BadInput(
                f"an export named {name!r} already exists; choose another --name"
            ) from exc
        return self.get(name)

    def get(self, name: str) -> ExportRecord:
        row = self._db.execute("SELECT * FROM exports WHERE name = ?", (name,)).fetchone()
        if row is None:
            known = ", ".join(r.name for r in self.list()[-10:]) or "none"
            raise BadInput(f"no export named {name!r}; known exports: {known}")
        return _record(row)

    def find(self, name: str) -> ExportRecord | None:
        row = self._db.execute("SELECT * FROM exports WHERE name = ?", (name,)).fetchone()
        return _record(row) if row else None

    def list(self) -> list[ExportRecord]:
        rows = self._db.execute("SELECT * FROM exports ORDER BY created").fetchall()
        return [_record(row) for row in rows]

    def move(self, name: str, step: str, end: str | None = None, message: str = "") -> Phase:
        """Take the export where `step` goes from its phase (the table in phases.py);
        `end` chooses among several ends. BadInput when the table has no such move."""
        phase = self.get(name).phase
        check(phase, step, name)
        possible = ends(step, phase)
        if end is None:
            if len(possible) != 1:
                raise ValueError(f"{step} from {phase} goes to one of {possible}; say which")
            end = possible[0]
        elif end not in possible:
            raise ValueError(f"{step} does not take an export from {phase} to {end}")
        if end != phase:
            self.set_phase(name, end, message)
        return Phase(end)

    def set_phase(self, name: str, phase: str, message: str = "") -> None:
        """Put the export in `phase`, whatever it was (for repairs and tests; steps use
        `move`, which keeps to the table)."""
        phase = Phase(phase).value  # ValueError for an unknown phase
        self._db.execute(
            "UPDATE exports SET phase = ?, updated = ? WHERE name = ?", (phase, time.time(), name)
        )
        self.step(name, f"phase:{phase}", "done", message)

    def update_info(self, name: str, **values: Any) -> None:
        record = self.get(name)
        record.info.update(values)
        self._db.execute(
            "UPDATE exports SET info = ?, updated = ? WHERE name = ?",
            (json.dumps(record.info), time.time(), name),
        )

    def step(self, name: str, step: str, status: str, message: str = "") -> None:
        self._db.execute(
            "INSERT INTO steps (export, step, status, time, message) VALUES (?,?,?,?,?)",
            (name, step, status, time.time(), message),
        )

    def steps(self, name: str) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT step, status, time, message FROM steps WHERE export = ? ORDER BY id", (name,)
        ).fetchall()
        return [{"step": s, "status": st, "time": t, "message": m} for s, st, t, m in rows]

    def delete(self, name: str) -> None:
        self._db.execute("DELETE FROM steps WHERE export = ?", (name,))
        self._db.execute("DELETE FROM exports WHERE name = ?", (name,))

    # ---- leases ----------------------------------------------------------------------

    def create_lease(self, name: str, *, site: str, info: dict[str, Any]) -> LeaseRecord:
        check_name(name, "lease")
        now = time.time()
        try:
            self._db.execute(
                "INSERT INTO leases VALUES (?,?,?,?,?,?)",
                (name, site, LeasePhase.CREATING.value, now, now, json.dumps(info)),
            )
        except sqlite3.IntegrityError as exc:
            raise BadInput(f"a lease named {name!r} already exists; choose another name") from exc
        return self.get_lease(name)

    def find_lease(self, name: str) -> LeaseRecord | None:
        row = self._db.execute("SELECT * FROM leases WHERE name = ?", (name,)).fetchone()
        return _lease(row) if row else None

    def get_lease(self, name: str) -> LeaseRecord:
        found = self.find_lease(name)
        if found is None:
            known = ", ".join(r.name for r in self.leases()[-10:]) or "none"
            raise BadInput(f"no lease named {name!r}; known leases: {known}")
        return found

    def leases(self) -> list[LeaseRecord]:
        rows = self._db.execute("SELECT * FROM leases ORDER BY created").fetchall()
        return [_lease(row) for row in rows]

    def move_lease(self, name: str, step: str, message: str = "") -> LeasePhase:
        """Take the lease where `step` goes from its phase (LEASE_MOVES); BadInput when
        it cannot start there."""
        phase = self.get_lease(name).phase
        end = lease_move(phase, step, name)
        if end != phase:
            self._db.execute(
                "UPDATE leases SET phase = ?, updated = ? WHERE name = ?",
                (end.value, time.time(), name),
            )
        self.step(lease_key(name), f"phase:{end.value}", "done", message)
        return end

    def update_lease_info(self, name: str, **values: Any) -> None:
        record = self.get_lease(name)
        record.info.update(values)
        self._db.execute(
            "UPDATE leases SET info = ?, updated = ? WHERE name = ?",
            (json.dumps(record.info), time.time(), name),
        )

    def joined(self, lease: str) -> list[ExportRecord]:
        """The exports that joined `lease`, oldest first."""
        return [r for r in self.list() if r.info.get("lease") == lease]

    def delete_lease(self, name: str) -> None:
        self._db.execute("DELETE FROM steps WHERE export = ?", (lease_key(name),))
        self._db.execute("DELETE FROM leases WHERE name = ?", (name,))

    @contextmanager
    def lock(self, name: str, wait: bool = False) -> Iterator[None]:
        """Hold the export's lock: one lumberjack process acts on an export at a time."""
        locks = self.directory / "locks"
        locks.mkdir(mode=0o700, exist_ok=True)
        with open(locks / f"{name}.lock", "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError as exc:
                raise Busy(f"export {name!r} is being worked on by another lumberjack") from exc
            yield


def _lease(row: tuple) -> LeaseRecord:
    name, site, phase, created, updated, info = row
    return LeaseRecord(name, site, LeasePhase(phase), created, updated, json.loads(info))


def _record(row: tuple) -> ExportRecord:
    name, site, phase, created, updated, bundle, spool, owner, clusters, jobs, info = row
    return ExportRecord(
        name, site, Phase(phase), created, updated, Path(bundle), spool, owner,
        json.loads(clusters), json.loads(jobs), json.loads(info),
    )  # fmt: skip
