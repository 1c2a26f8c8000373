"""Where a bundle's directory comes from (bundle_home): root makes it only in a parent no
user can change and hands it over last; anywhere else the owner makes it; a link at
`--out` is never followed, whoever made it and wherever it points."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lumberjack.ap.bundle_home import bundle_path, check_bundle_dir, make_bundle_dir
from lumberjack.errors import BadInput

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="root acting for another account")


def one_line(exc: pytest.ExceptionInfo[BadInput]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


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
    target.mkdir()
    target.chmod(0o755)  # explicit: other tests may leave the umask at 077
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


@as_root
def test_a_root_directory_inside_the_owners_is_made_through_descriptors(base: Path) -> None:
    """An --out in a directory root made in the owner's workspace (the owner may not
    write it): root makes the bundle there, through the directory's descriptor."""
    nobody = pwd.getpwnam("nobody")
    users = base / "users"
    (users / "roots").mkdir(parents=True)
    os.chown(users, nobody.pw_uid, nobody.pw_gid)
    make_bundle_dir(users / "roots" / "b1", "nobody")
    assert (users / "roots" / "b1" / "native").stat().st_uid == nobody.pw_uid
    assert (users / "roots").stat().st_uid == 0
    # ... and missing parents below the owner's directory are the owner's to make
    make_bundle_dir(users / "new" / "b2", "nobody")
    assert (users / "new").stat().st_uid == nobody.pw_uid
