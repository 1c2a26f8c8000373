"""Who may read what: the ledger 0600, bundle directories 0700, bundle files without group
or other bits, the site agent narrowing an export's tree; and, as root, inputs read with
the job owner's identity (a link to a root-only file refused, one the owner may read
followed). Real files, a real second account ("nobody") where root is needed."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from lumberjack.ap import as_user, bundle
from lumberjack.ap import export as export_mod
from lumberjack.ap.bundle_home import make_bundle_dir
from lumberjack.core.contract import ExportLayout
from lumberjack.errors import BadInput
from lumberjack.host.identity import owner_of
from lumberjack.site import files, remote_pool
from lumberjack.state.ledger import Ledger

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="acting for another user needs root")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_the_ledger_is_its_accounts_alone(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "state")
    ledger.create("calib", site=None, bundle_dir=tmp_path / "b", remote_spool="/s",
                  owner="alice", clusters=[1], jobs=["1.0"])  # fmt: skip
    with ledger.lock("calib"):
        pass
    assert mode(ledger.path) == 0o600
    assert mode(ledger.directory / "locks") == 0o700
    for journal in ledger.directory.glob("ledger.sqlite-*"):
        assert mode(journal) == 0o600, journal


def test_a_second_ledger_never_opens_the_database_file_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing any descriptor of the database drops the process's POSIX locks, those of
    an open SQLite connection too; the crash walk lost a WAL commit that way."""
    first = Ledger(tmp_path / "state")
    (tmp_path / "state" / "ledger.sqlite").chmod(0o644)  # an older version's mode
    opened: list[str] = []
    real_open = os.open

    def recording_open(path: str, *args: int, **kwargs: int) -> int:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    second = Ledger(tmp_path / "state")
    assert str(first.path) not in opened
    assert mode(second.path) == 0o600
    first.create("calib", site=None, bundle_dir=tmp_path / "b", remote_spool="/s",
                 owner="alice", clusters=[1], jobs=["1.0"])  # fmt: skip
    assert second.get("calib").owner == "alice"


def test_bundle_directories_and_files_are_the_owners_alone(tmp_path: Path) -> None:
    owned = tmp_path / "bundle"
    make_bundle_dir(owned, pwd.getpwuid(os.getuid()).pw_name)
    assert mode(owned) == 0o700
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    bundle.copy_hashed(script, owned / "spool" / "run.sh")
    assert mode(owned / "spool" / "run.sh") == 0o700  # executable, for the owner only
    data = tmp_path / "data.txt"
    data.write_text("x")
    data.chmod(0o644)
    bundle.copy_hashed(data, owned / "spool" / "data.txt")
    assert mode(owned / "spool" / "data.txt") == 0o600
    assert mode(owned / "spool") == 0o700


def test_a_fifo_is_no_input_and_never_blocks(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="not a regular file"):
        bundle.copy_hashed(fifo, tmp_path / "out")
    with pytest.raises(BadInput, match="not a regular file"):
        export_mod.check_inputs_json([{"local_path": str(fifo)}])


def test_the_agent_narrows_an_export_tree_without_following_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours to change")
    outside.chmod(0o644)
    root = tmp_path / "export"
    (root / "spool" / "7").mkdir(parents=True)
    (root / "spool" / "7" / "out").write_text("x")
    (root / "agent.pyz").write_text("x")
    (root / "agent.pyz").chmod(0o755)
    (root / "spool" / "link").symlink_to(outside)
    for path in (root, root / "spool", root / "spool" / "7"):
        path.chmod(0o755)
    (root / "spool" / "7" / "out").chmod(0o644)
    assert files.make_private(str(root)) == 5
    assert mode(root) == mode(root / "spool") == mode(root / "spool" / "7") == 0o700
    assert mode(root / "spool" / "7" / "out") == 0o600
    assert mode(root / "agent.pyz") == 0o700
    assert mode(outside) == 0o644
    assert files.make_private(str(root)) == 0  # again: nothing left to narrow


def test_a_pilot_is_never_given_write_or_daemon() -> None:
    assert set(remote_pool.PILOT_AUTHZ) == {"READ", "ADVERTISE_STARTD", "ADVERTISE_MASTER"}
    settings = remote_pool.PoolSettings(
        layout=ExportLayout("/scratch/lj/calib"), site_user="hpcuser",
        address="10.0.0.5", port=40123, image="/images/site.sif",
    )  # fmt: skip
    for text in (remote_pool.pool_config(settings), remote_pool.pilot_config(settings)):
        rules = {
            name.strip(): value.split()
            for name, _, value in (line.partition("=") for line in text.splitlines())
            if name.startswith("ALLOW_")
        }
        pilot_may = {name for name, who in rules.items() if settings.pilot_identity in who}
        assert pilot_may == {"ALLOW_READ", "ALLOW_ADVERTISE_STARTD", "ALLOW_ADVERTISE_MASTER"}
        assert not any(line.startswith("DENY_") for line in text.splitlines())


@pytest.fixture
def shared_dir():  # -> Path
    """A directory "nobody" can pass through (tmp_path lies under root's 0700 one)."""
    path = Path(tempfile.mkdtemp(prefix="lj-owner-reads-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@as_root
def test_inputs_are_read_with_the_owners_identity(shared_dir: Path) -> None:
    secret = shared_dir / "root-only"
    secret.write_text("root's secret\n")
    secret.chmod(0o600)
    public = shared_dir / "public"
    public.write_text("anyone may read this\n")
    public.chmod(0o644)
    inputs = shared_dir / "inputs"
    inputs.mkdir()
    inputs.chmod(0o755)  # explicit: the agent's tests leave this process's umask at 077
    (inputs / "to-secret").symlink_to(secret)
    (inputs / "to-public").symlink_to(public)
    folder = inputs / "folder"
    folder.mkdir()
    folder.chmod(0o755)
    (folder / "ok.txt").write_text("ok\n")
    (folder / "ok.txt").chmod(0o644)

    def check(*paths: Path) -> list[int]:
        args = {"inputs": [{"local_path": str(p)} for p in paths]}
        return as_user.call_as("nobody", export_mod.check_inputs_json, args)

    assert check(inputs / "to-public", folder) == [2, len("anyone may read this\n") + 3]
    with pytest.raises(BadInput, match=r"^input file .*/to-secret is not readable"):
        check(inputs / "to-secret")
    (folder / "sneaky").symlink_to(secret)
    with pytest.raises(BadInput, match=r"^input file .*/folder/sneaky is not readable"):
        check(folder)
    # Root itself (an owner that is root) reads in this process, as before.
    assert owner_of("root") is None
    with pytest.raises(BadInput, match="has no account on this machine"):
        owner_of("no-such-user-here")


@pytest.mark.skipif(os.geteuid() != 0, reason="root removing a user's bundle")
def test_root_finishes_removing_a_bundle_only_where_no_user_can_change_its_path() -> None:
    """remove_bundle removes the owner's files as the owner; what is left (a root-owned
    file of an older version) root removes only under a root-only parent: where the
    user owns a parent, it could be swapped for a link to a root directory meanwhile."""
    nobody = pwd.getpwnam("nobody")
    base = Path(tempfile.mkdtemp(prefix="lj-remove-"))
    try:
        os.chmod(base, 0o755)
        users = base / "users"  # the owner's: a path the owner may change
        users.mkdir()
        os.chown(users, nobody.pw_uid, nobody.pw_gid)
        for parent in (users, base):
            bundle = parent / "bundle"
            (bundle / "spool").mkdir(parents=True)
            (bundle / "spool" / "in.txt").write_text("owner's\n")
            for path in (bundle, bundle / "spool", bundle / "spool" / "in.txt"):
                os.chown(path, nobody.pw_uid, nobody.pw_gid)
            (bundle / "import-state").mkdir()  # root's, as an older version left it
            (bundle / "import-state" / "placed.log").write_text("7.0\n")
            export_mod.remove_bundle(bundle, "nobody")
        assert [p.name for p in (users / "bundle").iterdir()] == ["import-state"]
        assert not (base / "bundle").exists()
    finally:
        shutil.rmtree(base)
