"""Writing a user's outputs without following a link someone else could have made.

Import does this as the job's owner (identity.acting_as): the kernel decides what the
owner may write, and the owner's own links lead only where the owner may write anyway.
Every destination directory is opened component by component from ``/`` with
O_NOFOLLOW|O_DIRECTORY (openat through ``dir_fd``); when the process is root (an owner
that is root itself), a symbolic link on the way is followed only when nobody but root
could have made it (owned by root, in a directory only root can write), which keeps
``/home -> /data/home`` working. Missing directories are made through the parent's
descriptor. Files are created O_CREAT|O_EXCL|O_NOFOLLOW under a temporary name and
renamed with the directory descriptors, so a link planted at the temporary or the final
name is replaced, never written through.
"""

from __future__ import annotations

import errno
import os
import stat

from lumberjack.core import returns, sparse
from lumberjack.errors import BadInput

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINKS = 40  # as the kernel's own limit on links in one path lookup
CHUNK = 1 << 20


def _trusted_link(parent_fd: int, name: str) -> bool:
    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if os.geteuid() != 0:
        return True  # acting as ourselves: our own links lead only where we may write
    parent = os.fstat(parent_fd)
    return st.st_uid == 0 and parent.st_uid == 0 and not parent.st_mode & 0o022


def open_dir(path: str, create: bool = False) -> int:
    """A descriptor of the absolute directory ``path``; see the module docstring.

    With ``create``, missing components are made (mode 0777 less the umask).
    """
    if not path.startswith("/"):
        raise BadInput(f"{path!r} is not an absolute path")
    fd = os.open("/", _DIR_FLAGS)
    todo = [p for p in path.split("/") if p]
    links = 0
    try:
        while todo:
            name = todo.pop(0)
            if name == ".":
                continue
            if name == "..":
                raise BadInput(f"{path}: '..' in a destination path")
            try:
                new = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass  # made meanwhile; opened below with the same care
                new = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISLNK(st.st_mode):
                    raise BadInput(f"{path}: {name} is not a directory") from None
                if not _trusted_link(fd, name):
                    raise BadInput(
                        f"{path}: {name} is a symbolic link someone other than root could "
                        "have made; not following it"
                    ) from None
                links += 1
                if links > MAX_LINKS:
                    raise BadInput(f"{path}: too many symbolic links") from None
                target = os.readlink(name, dir_fd=fd)
                todo = [p for p in target.split("/") if p] + todo
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _DIR_FLAGS)
                continue
            os.close(fd)
            fd = new
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_file(
    dir_fd: int,
    name: str,
    source_fd: int,
    size: int,
    executable: bool,
) -> None:
    """Copy ``size`` bytes of ``source_fd`` to ``name`` in ``dir_fd``, atomically."""
    tmp = f".{name}.lumberjack-part"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    mode = 0o755 if executable else 0o644  # never the site's setuid or sticky bits
    try:
        out = os.open(tmp, flags, mode, dir_fd=dir_fd)
    except FileExistsError:
        # Ours from a crashed run, or planted: removing the name removes only the link.
        _remove_entry(dir_fd, tmp)
        out = os.open(tmp, flags, mode, dir_fd=dir_fd)
    try:
        left = size
        while left > 0:
            chunk = os.read(source_fd, min(CHUNK, left))
            if not chunk:
                raise BadInput(f"{name}: the returned file shrank while it was copied")
            sparse.write_past_end(out, chunk)  # a sparse output stays sparse
            left -= len(chunk)
        if os.read(source_fd, 1):
            raise BadInput(f"{name}: the returned file grew while it was copied")
        sparse.end_at(out, size)
        os.fsync(out)
    except BaseException:
        os.close(out)
        _remove_entry(dir_fd, tmp)
        raise
    os.close(out)
    try:
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except IsADirectoryError:
        _remove_entry(dir_fd, tmp)
        raise BadInput(f"{name}: a directory is in the way of this output") from None


def _remove_entry(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise BadInput(f"{name}: a directory is in the way of the temporary file") from None


def open_log(dir_fd: int, name: str) -> int:
    """The user log ``name`` opened for appending; created if missing.

    A link at the name is refused (ELOOP), a FIFO does not block (O_NONBLOCK, then
    checked by the caller with fstat).
    """
    # read-write: a rerun looks for its own earlier append (userlog.append_once)
    flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BadInput(f"user log {name} is a symbolic link; not appending to it") from None
        if exc.errno == errno.ENXIO:
            raise BadInput(f"user log {name} is a FIFO or socket; not appending to it") from None
        raise
    return fd


def open_returned(path: str) -> tuple[int, os.stat_result]:
    """A returned file opened for reading, refusing links, devices, FIFOs, sockets and
    files with other hard links (they could be someone else's file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BadInput(f"returned {path} is a symbolic link") from None
        raise BadInput(f"cannot read returned {path}: {exc.strerror}") from None
    st = os.fstat(fd)
    problem = returned_file_problem(st)
    if problem:
        os.close(fd)
        raise BadInput(f"returned {path} {problem}")
    return fd, st


def returned_file_problem(st: os.stat_result) -> str | None:
    """Why a returned file (lstat) is refused, or None (fetch's own rule, core.returns)."""
    return returns.entry_problem(returns.mode_kind(st.st_mode), st.st_nlink)
