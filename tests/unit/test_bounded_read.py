"""Reading a file its owner could replace (bounded_read), and where a bundle's directory
comes from (bundle_home): a FIFO, a device, a link or an oversized file is refused in one
line and never hangs; root makes a bundle only where no user can change the path, and
never follows one at `--out`."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lumberjack.ap import bundle
from lumberjack.ap.bounded_read import open_regular, read_regular
from lumberjack.ap.bundle_home import bundle_path, check_bundle_dir, make_bundle_dir
from lumberjack.errors import BadInput

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="root acting for another account")


@pytest.fixture(autouse=True)
def never_hangs() -> Iterator[None]:
    """A read that blocks fails the test instead of hanging it."""

    def hung(*_: object) -> None:
        raise AssertionError("the read blocked")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def one_line(exc: pytest.ExceptionInfo[BadInput]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_bytes(b"{}")
    assert read_regular(tmp_path / "manifest.json", "manifest", 2) == b"{}"


def test_a_fifo_with_no_writer_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "manifest.json")
    with pytest.raises(BadInput) as exc:
        read_regular(tmp_path / "manifest.json", "manifest", 100)
    assert one_line(exc).endswith("manifest.json is not a regular file; refusing to read it")


def test_a_link_to_dev_zero_is_refused(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").symlink_to("/dev/zero")
    with pytest.raises(BadInput) as exc:
        read_regular(tmp_path / "manifest.json", "manifest", 100)
    assert one_line(exc).endswith("manifest.json is a symbolic link; not following it")


def test_a_device_is_refused() -> None:
    with pytest.raises(BadInput, match="^manifest /dev/zero is not a regular file"):
        read_regular("/dev/zero", "manifest", 100)


def test_a_link_to_a_regular_file_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("{}")
    (tmp_path / "manifest.json").symlink_to(tmp_path / "real")
    with pytest.raises(BadInput, match="is a symbolic link"):
        read_regular(tmp_path / "manifest.json", "manifest", 100)


def test_a_file_over_the_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    (tmp_path / "job_queue.log").write_bytes(b"x" * 101)
    with pytest.raises(BadInput) as exc:
        read_regular(tmp_path / "job_queue.log", "queue log", 100)
    assert one_line(exc).endswith("is 101 bytes, more than the 100 allowed; refusing to read it")


def test_a_file_that_grows_past_the_bound_while_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "job_queue.log"
    path.write_bytes(b"x" * 10)
    with open_regular(path, "queue log", 20) as handle:
        with open(path, "ab") as more:
            more.write(b"y" * 100)
        with pytest.raises(BadInput, match="grew past 20 bytes while read"):
            handle.read()


def test_a_missing_file_stays_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "nothing", "manifest", 100)


def test_the_manifest_and_queue_readers_use_it(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / bundle.MANIFEST)
    with pytest.raises(BadInput, match="not a regular file"):
        bundle.read_manifest_once(tmp_path)
    (tmp_path / "native").mkdir()
    (tmp_path / "native" / "job_queue.log").symlink_to("/dev/zero")
    with pytest.raises(BadInput, match="symbolic link"):
        bundle.read_queue_log(tmp_path / "native" / "job_queue.log")
    os.unlink(tmp_path / bundle.MANIFEST)
    (tmp_path / bundle.MANIFEST).write_bytes(b"{" * 50)
    with pytest.raises(BadInput, match="50 bytes, more than the 49 allowed"):
        bundle.read_manifest_bytes(tmp_path, 49)


def test_a_bundle_path_is_never_resolved(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert bundle_path(tmp_path / "link") == tmp_path / "link"


def test_an_out_link_is_refused_for_oneself(tmp_path: Path) -> None:
    me = pwd.getpwuid(os.getuid()).pw_name
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    for check in (check_bundle_dir, make_bundle_dir):
        with pytest.raises(BadInput, match="is a symbolic link; give a real directory"):
            check(tmp_path / "link", me)
    assert list((tmp_path / "target").iterdir()) == []


@pytest.fixture
def base() -> Iterator[Path]:
    """A root-owned directory others may pass through (as the state dir is)."""
    made = Path(tempfile.mkdtemp(prefix="lj-bundle-home-"))
    os.chmod(made, 0o755)
    yield made
    shutil.rmtree(made)


@as_root
def test_root_makes_the_bundle_where_only_root_acts_and_hands_it_over(base: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    make_bundle_dir(base / "bundles" / "calib", "nobody")
    for path in (base / "bundles" / "calib", base / "bundles" / "calib" / "native"):
        info = path.lstat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (nobody.pw_uid, 0o700), path
    assert (base / "bundles").stat().st_uid == 0
    with pytest.raises(BadInput, match="is not empty"):
        check_bundle_dir(base / "bundles" / "calib", "nobody")


@as_root
@pytest.mark.parametrize("where", ["root's directory", "the owner's directory"])
def test_root_never_follows_an_out_link_to_a_root_directory(base: Path, where: str) -> None:
    nobody = pwd.getpwnam("nobody")
    target = base / "root-empty"
    target.mkdir(mode=0o755)
    parent = base / "users" if where == "the owner's directory" else base
    parent.mkdir(exist_ok=True)
    os.chown(parent, nobody.pw_uid if parent != base else 0, nobody.pw_gid if parent != base else 0)
    (parent / "out").symlink_to(target)
    os.lchown(parent / "out", nobody.pw_uid, nobody.pw_gid)
    for check in (check_bundle_dir, make_bundle_dir):
        with pytest.raises(BadInput) as exc:
            check(parent / "out", "nobody")
        assert one_line(exc).endswith("is a symbolic link; give a real directory")
    info = target.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o755)
    assert list(target.iterdir()) == []


@as_root
def test_in_the_owners_directory_the_owner_makes_it(base: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    users = base / "users"
    users.mkdir()
    os.chown(users, nobody.pw_uid, nobody.pw_gid)
    make_bundle_dir(users / "out", "nobody")
    assert (users / "out" / "native").stat().st_uid == nobody.pw_uid
    theirs = base / "bob"  # another account's empty directory under root's
    theirs.mkdir()
    os.chown(theirs, 1, 1)
    with pytest.raises(BadInput, match="belongs to another account"):
        make_bundle_dir(theirs, "nobody")
