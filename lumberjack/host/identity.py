"""Acting as a job's owner: who that is, and file operations with the owner's identity.

Root on an access point touches a user's paths only as that user, the way HTCondor's
shadow does (set_user_priv): the effective uid, gid and supplementary groups become the
owner's for the operation, so the kernel decides what may be read or written, and they
come back afterwards (the real and saved uid stay root, so the owner can neither signal
nor trace the process meanwhile). Work that must not share root's address space with
the owner's rights at all (reading inputs, writing a bundle, the schedd's import) runs
in a forked child that drops to the owner for good: see as_user.py.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lumberjack.errors import BadInput


@dataclass(frozen=True)
class Owner:
    """A local account root acts as."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]


def owner_of(name: str) -> Owner | None:
    """The account root acts as for `name`; None when this process may act itself (it
    is not root, or `name` is root). BadInput when `name` has no local account."""
    if os.getuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise BadInput(f"job owner {name!r} has no account on this machine") from None
    if entry.pw_uid == 0:
        return None
    groups = tuple(os.getgrouplist(name, entry.pw_gid))
    return Owner(name, entry.pw_uid, entry.pw_gid, groups)


def owner_of_path(path: str) -> Owner | None:
    """The owner of `path` (not followed) as the account to act as, for a bundle that
    came with no ledger entry: what a user hands root is read as that user."""
    try:
        uid = os.lstat(path).st_uid
    except OSError as exc:
        raise BadInput(f"{path}: {exc.strerror}") from None
    if os.getuid() != 0 or uid == 0:
        return None
    try:
        return owner_of(pwd.getpwuid(uid).pw_name)
    except KeyError:
        raise BadInput(f"{path} belongs to uid {uid}, which has no account here") from None


def user_writable_level(path: Path) -> tuple[Path, str] | None:
    """The first existing level of `path`, from /, that a user other than root could
    change, and how; None when root's at every level. A sticky directory (like /tmp) may
    be world-writable: nobody can move root's entries out of it."""
    current = Path("/")
    for part in path.absolute().parts[1:]:
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return None  # what root makes below is root's
        if stat.S_ISREG(info.st_mode):
            return current, "is a file, not a directory"
        if not stat.S_ISDIR(info.st_mode):
            return current, "is not a directory"
        if info.st_uid != 0:
            return current, "is not root's"
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            return current, "is writable by others"
    return None


@contextmanager
def acting_as(owner: Owner | None) -> Iterator[None]:
    """File operations in the block run with `owner`'s effective ids (None: as we are)."""
    if owner is None or os.geteuid() == owner.uid:
        yield
        return
    groups = os.getgroups()
    os.setgroups(owner.groups)
    os.setegid(owner.gid)
    os.seteuid(owner.uid)
    try:
        yield
    finally:
        # Back to root: uid first (only root may set the others), then gid and groups.
        os.seteuid(0)
        os.setegid(os.getgid())
        os.setgroups(groups)
