"""Returns sized to where they land: what the site offers is judged against the free
space of the file system that will hold it (less a reserve) before a byte moves; no
stream carries more than the site listed; a sparse file stays sparse on the way and
when import places it. The helper and the driver run for real (the "site" is a
directory here, reached through a local shell), and the small file system is a real
one: a tmpfs mounted in a mount namespace of a child process's own."""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import os
import pickle
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from test_fetch_guard import JOB0, spool
from test_transport import REPO, LocalCarrier, Recorder

from lumberjack.ap import safe_write
from lumberjack.core import returns, sparse
from lumberjack.core.returns import Limits, Room
from lumberjack.core.units import format_bytes
from lumberjack.errors import BadInput, RemoteError
from lumberjack.profiles.sites import load_profile
from lumberjack.transport import SiteConnection, transfer
from lumberjack.transport.transfer import NoRoom, ReturnGuard

MiB = 1 << 20
T = TypeVar("T")
CLONE_NEWNS = 0x00020000

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def conn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SiteConnection:
    """The testbed's profile, its "site" reached through a local shell."""
    monkeypatch.setenv("LUMBERJACK_TESTBED_DIR", str(tmp_path))
    return SiteConnection(load_profile(REPO / "site-profiles" / "testbed.toml"),
                          carrier=LocalCarrier())  # fmt: skip


def on_small_fs(where: Path, mib: int, action: Callable[[Path], T]) -> T:
    """`action(where)` in a child process that mounted a tmpfs of `mib` MiB at `where`
    in a mount namespace of its own: the file system ends with the child, whatever
    happens (nothing to unmount). Its answer, or its exception, comes back here."""
    where.mkdir(exist_ok=True)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(CLONE_NEWNS) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
            subprocess.run(["mount", "--make-rprivate", "/"], check=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m,mode=0700", "tmpfs",
                            str(where)], check=True)  # fmt: skip
            outcome: tuple[str, object] = ("answer", action(where))
        except BaseException as exc:  # noqa: BLE001 (handed to the parent as it is)
            outcome = ("raised", exc)
        with os.fdopen(write_end, "wb") as out:
            pickle.dump(outcome, out)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        data = answer.read()
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data)
    if kind == "raised":
        raise value
    return value


def sparse_file(path: Path, size: int, data_at: dict[int, bytes] | None = None) -> Path:
    """A file of `size` bytes that is one hole but for `data_at` (offset -> bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        out.truncate(size)
        for offset, data in (data_at or {}).items():
            out.seek(offset)
            out.write(data)
    return path


def real_bytes(path: Path) -> int:
    """Bytes of the file on disk (its blocks), not its length."""
    return os.stat(path).st_blocks * 512


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(8 * MiB):
            digest.update(chunk)
    return digest.hexdigest()


def files_below(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


# ---- the room: free space less a reserve


def test_an_offer_over_the_free_space_less_the_reserve_is_refused() -> None:
    guard = ReturnGuard(Limits(), "site s: /spool")
    room = Room("/state/work/x/returned", free=1100 * MiB, keep=1024 * MiB)
    guard.check_room(76 * MiB, room)  # fits exactly: nothing said
    with pytest.raises(NoRoom) as refused:
        guard.check_room(2048 * MiB, room)
    assert str(refused.value) == (
        "site s: /spool: offers 2.0 GiB but /state/work/x/returned has 1.1 GiB free "
        "(keeping 1.0 GiB, LUMBERJACK_RETURN_KEEP_FREE_BYTES); nothing fetched"
    )
    with pytest.raises(NoRoom):  # less free than the reserve: nothing fits
        guard.check_room(1, Room("/x", free=10, keep=20))


def test_the_reserve_comes_from_the_environment_or_is_the_larger_of_1_gib_and_5_percent(
    tmp_path: Path,
) -> None:
    fs = os.statvfs(tmp_path)
    room = returns.room_at(str(tmp_path), environ={})
    assert room.free == fs.f_bavail * fs.f_frsize
    assert room.keep == max(1 << 30, fs.f_blocks * fs.f_frsize // 20)
    assert room.usable == max(0, room.free - room.keep)
    set_here = {"LUMBERJACK_RETURN_KEEP_FREE_BYTES": "4096"}
    assert returns.room_at(str(tmp_path), environ=set_here).keep == 4096
    with pytest.raises(BadInput, match="LUMBERJACK_RETURN_KEEP_FREE_BYTES='lots' is not a nu"):
        returns.room_at(str(tmp_path), BadInput, {"LUMBERJACK_RETURN_KEEP_FREE_BYTES": "lots"})


def test_format_bytes() -> None:
    assert [format_bytes(n) for n in (0, 1023, 1024, 76 * MiB, 2 << 30, 3 << 40)] == [
        "0 bytes", "1023 bytes", "1.0 KiB", "76.0 MiB", "2.0 GiB", "3.0 TiB",
    ]  # fmt: skip


@needs_root
def test_a_site_offering_more_than_a_small_file_system_holds_is_refused_before_a_byte_moves(
    conn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = spool(tmp_path)
    sparse_file(site / JOB0 / "huge", 80 * MiB)  # 80 MiB offered, nearly nothing on disk
    monkeypatch.setenv("LUMBERJACK_RETURN_KEEP_FREE_BYTES", str(8 * MiB))

    def fetch_into(back: Path) -> tuple[list[str], list, int]:
        shown = Recorder()
        try:
            conn.download(str(site), back, progress=shown, limits=Limits())
        except NoRoom as exc:
            return [str(exc)], shown.tasks, len(files_below(back))
        return [], shown.tasks, len(files_below(back))

    said, tasks, files = on_small_fs(tmp_path / "small", 64, fetch_into)
    assert len(said) == 1, "fetched into a file system too small for it"
    assert f"offers 80.0 MiB but {tmp_path / 'small'} has 64.0 MiB free (keeping 8.0 MiB" in said[0]
    assert said[0].endswith("nothing fetched")
    assert tasks == [] and files == 0  # no byte moved, no file begun


@needs_root
def test_a_sparse_file_that_fits_lands_as_a_sparse_file(
    conn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = spool(tmp_path)
    huge = sparse_file(site / JOB0 / "huge", 40 * MiB, {10 * MiB + 5: b"data" * 1000})
    monkeypatch.setenv("LUMBERJACK_RETURN_KEEP_FREE_BYTES", str(8 * MiB))

    def fetch_into(back: Path) -> tuple[int, int, str, int]:
        conn.download(str(site), back, limits=Limits())  # sha256 checked on arrival
        landed = back / JOB0 / "huge"
        free = os.statvfs(back).f_bavail * os.statvfs(back).f_frsize
        return landed.stat().st_size, real_bytes(landed), sha256_of(landed), free

    size, on_disk, digest, free = on_small_fs(tmp_path / "small", 64, fetch_into)
    assert (size, digest) == (40 * MiB, sha256_of(huge))
    assert on_disk <= 64 << 10, f"{on_disk} bytes of blocks for 4000 bytes of data"
    assert free > 63 * MiB


# ---- no more than listed, and holes kept on the way


def test_a_site_that_lists_less_than_it_sends_is_stopped_before_the_file_is_written(
    conn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = spool(tmp_path)
    # Far more than the receiver reads past a refusal: the command must be ended.
    sparse_file(site / JOB0 / "big", 64 * MiB, {0: os.urandom(MiB)})
    real_scan = transfer.scan

    def lying_scan(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        listing = real_scan(*args, **kwargs)
        path = f"{JOB0}/big"
        listing[path] = dataclasses.replace(listing[path], size=10)
        return listing

    monkeypatch.setattr(transfer, "scan", lying_scan)
    back = tmp_path / "back"
    with pytest.raises(RemoteError, match="bytes 0..67108864 of a file it listed at 10 bytes"):
        conn.download(str(site), back, limits=Limits())
    landed = back / JOB0 / "big"
    assert not landed.exists() or landed.stat().st_size == 0


def test_a_downloaded_sparse_file_keeps_its_holes(conn, tmp_path: Path) -> None:
    site = spool(tmp_path)
    data = {0: b"head", 100 * MiB + 3: os.urandom(70_000), 256 * MiB - 4: b"tail"}
    huge = sparse_file(site / JOB0 / "huge", 256 * MiB, data)
    back = tmp_path / "back"
    report = conn.download(str(site), back, limits=Limits())
    landed = back / JOB0 / "huge"
    assert report.sent_bytes >= 256 * MiB  # every byte travelled...
    assert sha256_of(landed) == sha256_of(huge)
    assert real_bytes(landed) <= 256 << 10, real_bytes(landed)  # ...the zeros did not land


def test_zeros_past_the_end_are_skipped_wherever_the_pieces_begin(tmp_path: Path) -> None:
    pieces = [b"x", bytes(3 * sparse.BLOCK + 7), b"y" * 5000, bytes(9 * sparse.BLOCK), b"z", b""]
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for piece in pieces:
            sparse.write_past_end(fd, piece)
        sparse.write_past_end(fd, bytes(5 * sparse.BLOCK))  # a trailing hole...
        sparse.end_at(fd, sum(map(len, pieces)) + 5 * sparse.BLOCK)  # ...has its length
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(pieces) + bytes(5 * sparse.BLOCK)
    assert real_bytes(path) < path.stat().st_size // 2


def test_import_places_a_sparse_output_as_a_sparse_file(tmp_path: Path) -> None:
    returned = sparse_file(tmp_path / "returned" / "out.dat", 256 * MiB, {7 * MiB: b"result"})
    placed_dir = tmp_path / "user"
    placed_dir.mkdir()
    source, info = safe_write.open_returned(str(returned))
    dir_fd = safe_write.open_dir(str(placed_dir))
    try:
        safe_write.write_file(dir_fd, "out.dat", source, info.st_size, executable=False)
    finally:
        os.close(dir_fd)
        os.close(source)
    placed = placed_dir / "out.dat"
    assert placed.stat().st_size == 256 * MiB and sha256_of(placed) == sha256_of(returned)
    assert real_bytes(placed) <= 64 << 10, real_bytes(placed)
