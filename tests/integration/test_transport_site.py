"""The SSH transport against the emulated site: uploads and downloads that resume, verify
and refuse what they must."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from pathlib import Path

import pytest

from lumberjack.ap.bundle import FileEntry, entry_for
from lumberjack.errors import RemoteError, SetupError
from lumberjack.profiles.sites import find_profile
from lumberjack.transport import Progress, SiteConnection

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def profile(site):
    """The shipped testbed profile; its key paths come from $LUMBERJACK_TESTBED_DIR."""
    import testbed  # conftest puts containers/testbed on sys.path

    with pytest.MonkeyPatch.context() as patch:
        if "LUMBERJACK_TESTBED_DIR" not in os.environ:
            patch.setenv("LUMBERJACK_TESTBED_DIR", str(testbed.testbed_dir()))
        yield find_profile("testbed")


@pytest.fixture
def remote(profile):
    """A directory of this test's own at the site, removed afterwards."""
    path = f"~/transport-test-{uuid.uuid4().hex[:8]}"
    yield path
    with SiteConnection(profile) as conn:
        conn.run(f"rm -rf {path}")


def make_tree(root: Path, big: int = 3 << 20) -> list[FileEntry]:
    (root / "sub dir/deeper").mkdir(parents=True)
    (root / "name with space.txt").write_text("spaces are fine\n")
    (root / "sub dir/deeper/data.bin").write_bytes(os.urandom(big))
    (root / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (root / "run.sh").chmod(0o755)
    (root / "empty").write_bytes(b"")
    for n in range(50):
        (root / f"sub dir/small-{n:03d}.txt").write_text(f"small file {n}\n" * n)
    return [
        entry_for(root, str(p.relative_to(root))) for p in sorted(root.rglob("*")) if p.is_file()
    ]


def remote_sums(conn: SiteConnection, root: str) -> dict[str, str]:
    """sha256 of every file at the site, by coreutils (not by the code under test)."""
    out = conn.run(f"cd {root} && find . -type f -print0 | xargs -0 sha256sum").stdout
    return {line[66:].removeprefix("./"): line[:64] for line in out.splitlines()}


def test_upload_resumes_and_verifies(profile, remote, tmp_path: Path) -> None:
    files = make_tree(tmp_path / "src")
    total = sum(f.size for f in files)
    with SiteConnection(profile) as conn:
        first = conn.upload(tmp_path / "src", f"{remote}/up", files)
        assert (first.sent_files, first.sent_bytes) == (len(files), total)
        root = conn.expand(f"{remote}/up")
        assert remote_sums(conn, root) == {f.path: f.sha256 for f in files}
        assert conn.run(f"{root}/run.sh").stdout == "ran\n"  # executable bit kept
        assert conn.run(f"stat -c %a '{root}/name with space.txt'").stdout.strip() == "644"

        again = conn.upload(tmp_path / "src", f"{remote}/up", files)
        assert (again.sent_files, again.sent_bytes) == (0, 0)
        assert (again.skipped_files, again.skipped_bytes) == (len(files), total)

        # Truncate one file, corrupt another (same size), delete a third: only they move.
        conn.run(f"truncate -s 1000 '{root}/sub dir/deeper/data.bin'")
        conn.run(f"printf X | dd of='{root}/sub dir/small-010.txt' bs=1 seek=3 conv=notrunc")
        conn.run(f"rm '{root}/name with space.txt'")
        repair = conn.upload(tmp_path / "src", f"{remote}/up", files)
        sizes = {f.path: f.size for f in files}
        assert repair.sent_files == 3
        # The truncated file's first 1000 bytes were right: only the rest is sent.
        assert repair.resumed_files == 1
        assert repair.sent_bytes == (
            sizes["sub dir/deeper/data.bin"]
            - 1000
            + sizes["sub dir/small-010.txt"]
            + sizes["name with space.txt"]
        )
        assert remote_sums(conn, root) == {f.path: f.sha256 for f in files}

        # A lost executable bit is put back without resending the bytes.
        conn.run(f"chmod 644 {root}/run.sh")
        fixed = conn.upload(tmp_path / "src", f"{remote}/up", files)
        assert (fixed.sent_files, fixed.sent_bytes) == (1, 0)
        assert conn.run(f"{root}/run.sh").stdout == "ran\n"


def test_interrupted_upload_resumes(profile, remote, tmp_path: Path) -> None:
    # Big enough that what is in flight when the link drops (SSH window, socket buffers:
    # a few MiB, lost) is small next to what already arrived.
    files = make_tree(tmp_path / "src", big=32 << 20)
    total = sum(f.size for f in files)
    conn = SiteConnection(profile)
    conn.open()

    class Cut(Progress):
        sent = 0

        def advance(self, n: int) -> None:
            self.sent += n
            if self.sent >= total // 2:
                conn.close()  # the network goes away mid-stream

    with pytest.raises(RemoteError, match="lost during upload; run the same command again"):
        conn.upload(tmp_path / "src", f"{remote}/up", files, progress=Cut())

    with SiteConnection(profile) as again:
        resumed = again.upload(tmp_path / "src", f"{remote}/up", files)
        assert resumed.resumed_files == 1  # the big file continues where it stopped
        assert 0 < resumed.sent_bytes < total * 3 // 4
        assert resumed.skipped_bytes + resumed.sent_bytes == total
        assert remote_sums(again, again.expand(f"{remote}/up")) == {f.path: f.sha256 for f in files}


def test_download_resumes_and_verifies(profile, remote, tmp_path: Path) -> None:
    files = make_tree(tmp_path / "src")
    total = sum(f.size for f in files)
    down = tmp_path / "down"
    with SiteConnection(profile) as conn:
        conn.upload(tmp_path / "src", f"{remote}/tree", files)
        got = conn.download(f"{remote}/tree", down)
        assert (got.sent_files, got.sent_bytes) == (len(files), total)
        assert [entry_for(down, f.path) for f in files] == files
        assert os.access(down / "run.sh", os.X_OK)

        again = conn.download(f"{remote}/tree", down)
        assert (again.sent_files, again.sent_bytes, again.skipped_files) == (0, 0, len(files))

        # A partial local file continues; a corrupted one comes whole; excluded ones stay away.
        data = down / "sub dir/deeper/data.bin"
        data.write_bytes(data.read_bytes()[:4096])
        (down / "name with space.txt").write_text("SPACES are fine\n")
        (down / "run.sh").unlink()
        partial = conn.download(f"{remote}/tree", down, exclude=["run.sh"])
        assert partial.sent_files == 2 and partial.resumed_files == 1
        assert partial.sent_bytes == (3 << 20) - 4096 + len("spaces are fine\n")
        assert not (down / "run.sh").exists()
        assert [entry_for(down, f.path) for f in files if f.path != "run.sh"] == [
            f for f in files if f.path != "run.sh"
        ]


def test_download_skips_and_reports_a_remote_symlink_and_fifo(profile, remote, tmp_path) -> None:
    with SiteConnection(profile) as conn:
        root = conn.expand(f"{remote}/out")
        conn.run(f"mkdir -p {root}/job && echo ok > {root}/job/out.txt")
        conn.run(f"ln -s /etc/passwd {root}/job/passwd && mkfifo {root}/job/fifo")
        got = conn.download(f"{remote}/out", tmp_path / "down")
        assert got.bad_entries == [("job/fifo", "is a FIFO"), ("job/passwd", "is a symbolic link")]
        assert (tmp_path / "down" / "job" / "out.txt").read_text() == "ok\n"
        assert sorted(p.name for p in (tmp_path / "down" / "job").iterdir()) == ["out.txt"]


def test_upload_refuses_to_write_through_a_remote_symlink(profile, remote, tmp_path) -> None:
    files = make_tree(tmp_path / "src")
    with SiteConnection(profile) as conn:
        root = conn.expand(f"{remote}/up")
        outside = conn.expand(f"{remote}/outside")
        conn.run(f"mkdir -p {root} {outside} && ln -s {outside} '{root}/sub dir'")
        with pytest.raises(RemoteError, match="is not a directory"):
            conn.upload(tmp_path / "src", f"{remote}/up", files)
        assert conn.run(f"ls -A {outside}").stdout == ""


def test_home_expand_run_and_put_bytes(profile, remote) -> None:
    with SiteConnection(profile) as conn:
        assert conn.home() == "/home/hpcuser"
        assert conn.expand(f"{remote}/x") == f"/home/hpcuser/{remote[2:]}/x"
        assert conn.expand("$HOME/lumberjack") == "/home/hpcuser/lumberjack"
        with pytest.raises(RemoteError, match="cannot expand \\$NO_SUCH_VARIABLE_X"):
            conn.expand("$NO_SUCH_VARIABLE_X/lumberjack")
        conn.put_bytes(b"#!/bin/sh\necho put\n", f"{remote}/bin/tool", 0o750)
        assert conn.run(f"{remote}/bin/tool").stdout == "put\n"
        assert conn.run(f"stat -c %a {remote}/bin/tool").stdout.strip() == "750"
        assert conn.run("ls -A " + f"{remote}/bin").stdout.split() == ["tool"]  # no .part left
        assert conn.run("cat", stdin=b"round trip\n").stdout == "round trip\n"
        failed = conn.run("echo oops >&2; exit 7", check=False)
        assert (failed.exited, failed.stderr) == (7, "oops\n")
        with pytest.raises(RemoteError, match=r"failed \(exit 7\): oops"):
            conn.run("echo oops >&2; exit 7")


def test_unknown_host_key_is_refused(profile, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    stranger = dataclasses.replace(profile, known_hosts=str(empty))
    with pytest.raises(SetupError) as caught:  # exit 7: a person checks the key
        SiteConnection(stranger).open()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("host key of [10.251.0.2]:2222 is not in")
    assert f"ssh-keyscan -p 2222 10.251.0.2 >> {empty}" in message
    assert "fingerprint" in message


def test_changed_host_key_is_refused(profile, tmp_path: Path) -> None:
    pinned = profile.known_hosts_path().read_text().split()
    other = (Path(os.environ["LUMBERJACK_TESTBED_DIR"]) / "site/id_ed25519.pub").read_text()
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"{pinned[0]} {' '.join(other.split()[:2])}\n")
    with pytest.raises(SetupError, match="does not match .* someone is in the way"):
        SiteConnection(dataclasses.replace(profile, known_hosts=str(wrong))).open()


def test_refused_connection_names_host_and_port(profile) -> None:
    closed = dataclasses.replace(profile, port=2)
    with pytest.raises(RemoteError, match="^cannot connect to 10.251.0.2:2: connection refused$"):
        SiteConnection(closed).open()


def test_unknown_host_key_exits_7_from_the_command_line(profile, tmp_path: Path) -> None:
    """The command line as cron meets it: a site whose host key is not pinned is a setup
    mistake (exit 7, one line naming the fix), not "site failed, retry later" (3); and
    `login` at a key site goes to ssh with no terminal, speaking of no one-time code."""
    from journey import lumberjack

    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (tmp_path / "known_hosts").write_text("")
    text = profile.path.read_text()
    text = text.replace('name = "testbed"', 'name = "stranger"')
    text = text.replace('known_hosts = "${LUMBERJACK_TESTBED_DIR}/site/known_hosts"',
                        f'known_hosts = "{tmp_path}/known_hosts"')  # fmt: skip
    (profiles / "stranger.toml").write_text(text)
    env = {"LUMBERJACK_SITE_PROFILES": str(profiles), "LUMBERJACK_STATE_DIR": str(tmp_path / "s")}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        refused = lumberjack("login", "stranger", check=False)
        as_json = lumberjack("login", "stranger", "--json", check=False)
    assert refused.returncode == 7, refused.stderr
    assert refused.stdout == ""
    assert refused.stderr.startswith("error: host key of [10.251.0.2]:2222 is not in ")
    assert "ssh-keyscan -p 2222 10.251.0.2 >> " in refused.stderr
    assert "one-time code" not in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert as_json.returncode == 7 and json.loads(as_json.stdout)["ok"] is False
