"""Where an export's bundle directory comes from: made so that root never creates,
chmods or chowns anything by path inside a directory a user can write.

Two cases, decided by the bundle's parent as root holds it open:

- The parent, reached from / without following any link a user could have made
  (safe_write.open_dir), is root's and only root may write it (or it is sticky, like
  /tmp): root's `bundles/`, or an `--out` in a directory of root's. Root makes the
  bundle there, as import's handover does: the bundle directory made (or an empty one of
  root's taken) and opened O_NOFOLLOW through the parent's descriptor, `native/` (where
  the schedd, acting as the owner, writes its export) made inside it through that
  descriptor, both given to the owner with fchown, the bundle directory last. Nothing is
  reached by path afterwards: from then on it is the owner's. (Missing parents root
  makes only where every level is root's.)
- Anywhere else (an `--out` in a directory a user can write, or reached through a
  user's link): the owner's child process (as_user) makes and checks the directory and
  `native/`, and the kernel decides. A link at the name is refused there too, whatever
  it points at: `--out` is never followed.

Why not always the owner's child: root's `bundles/` (0711) is no place the owner may
write. Why not always root: the owner's own links on the way are followed only as the
owner.

An existing directory must be empty; one of another account's is refused.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from lumberjack.ap import as_user, safe_write
from lumberjack.ap.bundle import NATIVE
from lumberjack.errors import BadInput
from lumberjack.host.identity import Owner, owner_of, user_writable_level

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def bundle_path(given: Path) -> Path:
    """An absolute bundle path as given, never resolved through a link (`..` is taken
    as written)."""
    return Path(os.path.abspath(given))


def check_bundle_dir(path: Path, owner: str) -> None:
    """Refuse (BadInput, nothing changed) a bundle directory that make_bundle_dir would
    refuse: a link, not a directory, not empty, another account's."""
    _make(path, owner, create=False)


def make_bundle_dir(path: Path, owner: str) -> None:
    """`path` (new or empty) and its `native/`, the owner's, 0700: see the module."""
    _make(path, owner, create=True)


def _make(path: Path, owner: str, create: bool) -> None:
    found = owner_of(owner)
    if found is not None:
        parent_fd = _roots_parent(path.parent, create)
        if parent_fd is not None:
            try:
                if _in_roots_parent(parent_fd, path, found, create):
                    return
            finally:
                os.close(parent_fd)
    as_user.call_as(owner, owners_bundle_dir, {"path": str(path), "create": create})


def _roots_parent(parent: Path, create: bool) -> int | None:
    """A descriptor of `parent` when only root may change it (see the module), else
    None (the owner's child acts)."""
    try:
        fd = safe_write.open_dir(str(parent))
    except FileNotFoundError:
        if not create or user_writable_level(parent) is not None:
            return None
        try:
            fd = safe_write.open_dir(str(parent), create=True)
        except OSError as exc:
            raise BadInput(f"cannot create export directory {parent}: {exc.strerror}") from exc
    except (OSError, BadInput):
        return None  # a user's link or no directory on the way: the owner looks
    info = os.fstat(fd)
    if info.st_uid == 0 and (not info.st_mode & 0o022 or info.st_mode & stat.S_ISVTX):
        return fd
    os.close(fd)
    return None


def _in_roots_parent(parent_fd: int, path: Path, owner: Owner, create: bool) -> bool:
    """Make `path` in root's open parent; False when it is the owner's own directory
    already (the owner's child takes it from there)."""
    made = False
    if create:
        try:
            os.mkdir(path.name, 0o700, dir_fd=parent_fd)
            made = True
        except FileExistsError:
            pass
    try:
        dir_fd = os.open(path.name, _DIR, dir_fd=parent_fd)
    except FileNotFoundError:
        return True  # checking only: nothing there yet, nothing to refuse
    except OSError as exc:
        link = _is_link(lambda: os.stat(path.name, dir_fd=parent_fd, follow_symlinks=False))
        raise _refusal(path, exc, link) from None
    try:
        info = os.fstat(dir_fd)
        if not made and os.listdir(dir_fd):
            raise _not_empty(path)
        if info.st_uid == owner.uid and not made:
            return False
        if info.st_uid != 0:
            raise BadInput(f"export directory {path} belongs to another account")
        if create:
            _hand_over(dir_fd, owner)
    finally:
        os.close(dir_fd)
    return True


def _hand_over(dir_fd: int, owner: Owner) -> None:
    """native/ made and given to the owner, then the bundle directory itself: last."""
    os.fchmod(dir_fd, 0o700)
    os.mkdir(NATIVE, 0o700, dir_fd=dir_fd)
    native_fd = os.open(NATIVE, _DIR, dir_fd=dir_fd)
    try:
        os.fchown(native_fd, owner.uid, owner.gid)
    finally:
        os.close(native_fd)
    os.fchown(dir_fd, owner.uid, owner.gid)


def owners_bundle_dir(path: str, create: bool, progress: object = None) -> bool:
    """As the owner (as_user): `path` checked, and with `create` made (0700) with its
    `native/`; never through a link at `path`."""
    try:
        return _owners(path, create)
    except OSError as exc:
        raise _refusal(Path(path), exc, _is_link(lambda: os.lstat(path))) from None


def _owners(path: str, create: bool) -> bool:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return True
        try:
            os.makedirs(path, 0o700)
        except OSError as exc:
            raise BadInput(f"cannot create export directory {path}: {exc.strerror}") from exc
        info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise BadInput(f"export directory {path} is a symbolic link; give a real directory")
    if not stat.S_ISDIR(info.st_mode):
        raise _not_empty(Path(path))
    fd = os.open(path, _DIR)  # a link put there meanwhile: refused
    try:
        if os.listdir(fd):
            raise _not_empty(Path(path))
        if os.fstat(fd).st_uid != os.geteuid():
            raise BadInput(f"export directory {path} belongs to another account")
        if create:
            os.fchmod(fd, 0o700)
            os.mkdir(NATIVE, 0o700, dir_fd=fd)
    finally:
        os.close(fd)
    return True


def _is_link(lstat: Callable[[], os.stat_result]) -> bool:
    try:
        return stat.S_ISLNK(lstat().st_mode)
    except OSError:
        return False


def _refusal(path: Path, exc: OSError, link: bool) -> BadInput:
    # O_NOFOLLOW|O_DIRECTORY on a link fails with ENOTDIR, not ELOOP
    if link or exc.errno == errno.ELOOP:
        return BadInput(f"export directory {path} is a symbolic link; give a real directory")
    if exc.errno == errno.ENOTDIR:
        return _not_empty(path)
    return BadInput(f"cannot open export directory {path}: {exc.strerror}")


def _not_empty(path: Path) -> BadInput:
    return BadInput(f"export directory {path} is not empty; give a new or empty directory")
