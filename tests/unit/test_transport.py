"""The transport's pure parts: listings, plans, refusals; the helper run locally."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import paramiko
import pytest

from lumberjack.ap.bundle import FileEntry, entry_for
from lumberjack.core.returns import Limits
from lumberjack.errors import BadInput, RemoteError, SetupError
from lumberjack.profiles.sites import load_profile
from lumberjack.site import transfer_helper
from lumberjack.transport import (
    FileState,
    Progress,
    RunResult,
    SiteConnection,
    check_download_listing,
    helper_command,
    hostkeys,
    local_states,
    parse_listing,
    plan,
    verify_states,
)
from lumberjack.transport.fabric_carrier import CONNECT_TIMEOUT

REPO = Path(__file__).resolve().parents[2]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def entry(path: str, data: bytes, executable: bool = False) -> FileEntry:
    return FileEntry(path, len(data), sha(data), executable)


def state(path: str, data: bytes, kind: str = "f", executable: bool = False) -> FileState:
    return FileState(path, kind, len(data), executable, sha(data) if kind == "f" else None)


# ---- listing parser


def test_parse_listing_reads_json_lines() -> None:
    text = (
        json.dumps(["f", "a b/c.txt", 3, True, sha(b"abc")])
        + "\n"
        + json.dumps(["l", "link", 11, False, None])
        + "\n"
    )
    states = parse_listing(text, "site")
    assert states["a b/c.txt"] == FileState("a b/c.txt", "f", 3, True, sha(b"abc"))
    assert states["link"].kind == "l"


@pytest.mark.parametrize(
    "line",
    [
        "not json",
        json.dumps(["x", "a", 1, False, None]),
        json.dumps(["f", "a", -1, False, None]),
        json.dumps(["f", "a", 1, False, "nothex"]),
        json.dumps(["f", "a", 1]),
        json.dumps({"f": 1}),
    ],
)
def test_parse_listing_refuses_garbage(line: str) -> None:
    with pytest.raises(RemoteError, match="unreadable listing line 1"):
        parse_listing(line + "\n", "site")


# ---- plans


def test_plan_sends_missing_and_changed_skips_identical() -> None:
    wanted = [entry("same", b"x" * 10), entry("changed", b"new"), entry("missing", b"m")]
    have = {"same": state("same", b"x" * 10), "changed": state("changed", b"old")}
    steps, done = plan(wanted, have)
    assert [e.path for e in done] == ["same"]
    assert [(s.path, s.offset, s.length) for s in steps] == [("changed", 0, 3), ("missing", 0, 1)]


def test_plan_continues_a_partial_file_only_when_its_bytes_match() -> None:
    data = bytes(range(256)) * 40
    wanted = [entry("part", data), entry("bad-part", data)]
    have = {"part": state("part", data[:1000]), "bad-part": state("bad-part", b"\0" * 1000)}

    def prefix_sha(path: str, n: int) -> str:
        return sha(data[:n])

    steps, done = plan(wanted, have, prefix_sha)
    assert done == []
    assert [(s.path, s.offset, s.length) for s in steps] == [
        ("part", 1000, len(data) - 1000),
        ("bad-part", 0, len(data)),
    ]


def test_plan_restarts_files_longer_than_wanted_or_not_regular() -> None:
    wanted = [entry("long", b"ab"), entry("link", b"ab"), entry("dir", b"ab")]
    have = {
        "long": FileState("long", "f", 5, False, None),
        "link": FileState("link", "l", 2, False, None),
        "dir": FileState("dir", "d", 4096, False, None),
    }
    steps, _ = plan(wanted, have)
    assert [(s.path, s.offset) for s in steps] == [("long", 0), ("link", 0), ("dir", 0)]


def test_plan_fixes_the_executable_bit_without_resending() -> None:
    steps, done = plan(
        [entry("run.sh", b"#!/bin/sh\n", True)], {"run.sh": state("run.sh", b"#!/bin/sh\n")}
    )
    assert done == []
    assert [(s.path, s.offset, s.length, s.executable) for s in steps] == [("run.sh", 10, 0, True)]


def test_verify_states_names_each_problem() -> None:
    wanted = [entry("a", b"a"), entry("b", b"b"), entry("c", b"c"), entry("x", b"x", True)]
    have = {"b": state("b", b"bb"), "c": state("c", b"C"), "x": state("x", b"x")}
    assert verify_states(wanted, have) == [
        "a: missing",
        "b: size 2 != 1",
        "c: sha256 mismatch",
        "x: executable bit differs",
    ]


# ---- refusing what the site lists


@pytest.mark.parametrize(
    "name",
    ["../etc/passwd", "/etc/passwd", "a/../../b", "a//b", "new\nline", "esc\x1b[2J", "bad\udcff"],
)
def test_unsafe_names_from_the_site_are_skipped(name: str) -> None:
    entries, skipped = check_download_listing({name: state(name, b"x")})
    assert entries == [] and [p for p, _ in skipped] == [name]
    assert skipped[0][1].startswith("unsafe name (")


def test_symlinks_special_files_and_hard_links_from_the_site_are_skipped() -> None:
    listing = {
        "out/link": state("out/link", b"", kind="l"),
        "fifo": state("fifo", b"", kind="p"),
        "dev": state("dev", b"", kind="c"),
        "sock": state("sock", b"", kind="s"),
        "other": state("other", b"", kind="o"),
        "twin": FileState("twin", "f", 1, False, sha(b"x"), 2),
        "ok": state("ok", b"x"),
    }
    entries, skipped = check_download_listing(listing)
    assert entries == [entry("ok", b"x")]
    assert dict(skipped) == {
        "out/link": "is a symbolic link", "fifo": "is a FIFO", "dev": "is a device",
        "sock": "is a socket", "other": "is not a regular file",
        "twin": "has other hard links (maybe to a file outside the spool)",
    }  # fmt: skip


def test_download_listing_becomes_entries() -> None:
    listing = {"b": state("b", b"bb", executable=True), "a b": state("a b", b"a")}
    assert check_download_listing(listing) == ([entry("a b", b"a"), entry("b", b"bb", True)], [])
    # Over the cap the site lists a file without reading it: kept, for the caller to refuse.
    big = {"big": FileState("big", "f", 10, False, None)}
    assert check_download_listing(big, max_size=5) == ([FileEntry("big", 10, "", False)], [])
    assert check_download_listing(big)[1] == [("big", "was listed without its sha256")]


# ---- the helper (the program run at the site), run here


def run_helper(mode: str, root: Path, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    """Run the helper exactly as the site would: its command line through a shell."""
    return subprocess.run(
        ["/bin/sh", "-c", helper_command(mode, str(root))],
        input=stdin,
        capture_output=True,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )


def frame(path: str, data: bytes, offset: int = 0, executable: bool = False) -> bytes:
    head = {"p": path, "o": offset, "n": len(data) - offset, "x": executable}
    return (json.dumps(head) + "\n").encode() + data[offset:]


def test_helper_receives_scans_and_sends_a_tree(tmp_path: Path) -> None:
    root = tmp_path / "site"
    stream = frame("a b.txt", b"hello") + frame("sub/run.sh", b"#!/bin/sh\n", executable=True)
    done = run_helper("recv", root, stream + b'{"end": true}\n')
    assert done.returncode == 0, done.stderr
    assert (root / "a b.txt").read_bytes() == b"hello"
    assert os.access(root / "sub/run.sh", os.X_OK)

    listing = run_helper("scan", root, b"{}")
    states = parse_listing(listing.stdout.decode(), "here")
    assert states["sub/run.sh"] == state("sub/run.sh", b"#!/bin/sh\n", executable=True)
    assert set(states) == {"a b.txt", "sub/run.sh"}
    # recv lists what it wrote, hashed as written: what a scan afterwards finds
    assert parse_listing(done.stdout.decode(), "recv") == states

    request = {"files": [["a b.txt", 0, None], ["sub/run.sh", 0, None]]}
    sent = run_helper("send", root, json.dumps(request).encode())
    assert sent.returncode == 0, sent.stderr
    copy = tmp_path / "copy"
    assert transfer_helper.receive(str(copy), io.BytesIO(sent.stdout)) == (2, 15)
    assert (copy / "sub/run.sh").read_bytes() == b"#!/bin/sh\n"


def test_helper_continues_a_partial_file(tmp_path: Path) -> None:
    root = tmp_path / "site"
    data = os.urandom(5000)
    run_helper("recv", root, frame("f", data[:1200]))  # no end: an interrupted stream
    assert (root / "f").read_bytes() == data[:1200]
    have = local_states(root, ["f"], {"f": 5000})
    steps, _ = plan([entry("f", data)], have, lambda p, n: sha(data[:n]))
    assert (steps[0].offset, steps[0].length) == (1200, 3800)
    done = run_helper("recv", root, frame("f", data, offset=1200) + b'{"end": true}\n')
    assert done.returncode == 0, done.stderr
    assert (root / "f").read_bytes() == data
    # the listing's sha256 covers the kept start too: the whole file
    assert parse_listing(done.stdout.decode(), "recv") == {"f": state("f", data)}


def test_helper_sender_restarts_when_the_partial_file_differs(tmp_path: Path) -> None:
    root = tmp_path / "site"
    root.mkdir()
    (root / "f").write_bytes(b"0123456789")
    request = {"files": [["f", 4, sha(b"XXXX")], ["g", 0, None]]}
    (root / "g").write_bytes(b"")
    sent = run_helper("send", root, json.dumps(request).encode())
    first = json.loads(sent.stdout.split(b"\n", 1)[0])
    assert first == {"p": "f", "o": 0, "n": 10, "x": False}


def test_helper_never_writes_through_a_symlink(tmp_path: Path) -> None:
    root, outside = tmp_path / "site", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "dir").symlink_to(outside)
    (root / "leaf").symlink_to(outside / "target")
    done = run_helper("recv", root, frame("dir/x", b"evil") + b'{"end": true}\n')
    assert done.returncode == 3
    assert b"is not a directory" in done.stderr
    assert not (outside / "x").exists()
    # A symlink where a file goes is replaced by the file, not followed.
    done = run_helper("recv", root, frame("leaf", b"fine") + b'{"end": true}\n')
    assert done.returncode == 0, done.stderr
    assert not (root / "leaf").is_symlink() and (root / "leaf").read_bytes() == b"fine"
    assert not (outside / "target").exists()


def test_helper_refuses_unsafe_paths_in_the_stream(tmp_path: Path) -> None:
    done = run_helper("recv", tmp_path / "site", frame("../escape", b"x"))
    assert done.returncode == 3
    assert b"unsafe path" in done.stderr
    assert not (tmp_path / "escape").exists()


def test_helper_scan_lists_symlinks_without_following(tmp_path: Path) -> None:
    root = tmp_path / "site"
    (root / "d").mkdir(parents=True)
    (root / "d/f").write_bytes(b"f")
    (root / "out").symlink_to(tmp_path)
    (root / "skip").mkdir()
    (root / "skip/big").write_bytes(b"b")
    listing = run_helper("scan", root, json.dumps({"exclude": ["skip"]}).encode())
    states = parse_listing(listing.stdout.decode(), "here")
    assert {p: s.kind for p, s in states.items()} == {"d/f": "f", "out": "l"}
    # Asked for paths below a symlinked directory, it reports the link, never the target.
    listing = run_helper("scan", root, json.dumps({"want": {"out/site/d/f": 1}}).encode())
    assert parse_listing(listing.stdout.decode(), "here")["out/site/d/f"].kind == "l"


def test_local_states_hash_only_plausible_files(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"abc")
    states = local_states(tmp_path, ["a", "missing"], {"a": 2, "missing": 1})
    assert states == {"a": FileState("a", "f", 3, False, None)}  # longer than wanted: no sha
    assert entry_for(tmp_path, "a").sha256 == local_states(tmp_path, ["a"], {"a": 3})["a"].sha256


# ---- connection set-up that needs no site


@pytest.fixture
def profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LUMBERJACK_TESTBED_DIR", str(tmp_path))
    return load_profile(REPO / "site-profiles" / "testbed.toml")


@pytest.mark.parametrize("path", ["$(reboot)", "~/a b", "relative/dir", "/srv/`x`", "/a;b"])
def test_expand_refuses_what_a_shell_would_run(profile, path: str) -> None:
    with pytest.raises(BadInput, match="does not pass to a shell"):
        SiteConnection(profile).expand(path)


def test_plain_absolute_paths_need_no_site(profile) -> None:
    assert SiteConnection(profile).expand("/home/hpcuser/lumberjack/") == "/home/hpcuser/lumberjack"


def test_missing_identity_file_is_bad_input(profile) -> None:
    with pytest.raises(SetupError, match="identity_file .* does not exist"):
        SiteConnection(profile).open()


def test_host_key_messages_say_how_to_fix_it(profile, tmp_path: Path) -> None:
    known = tmp_path / "site" / "known_hosts"

    def connect_error(exc: BaseException) -> BaseException:
        return hostkeys.connect_error(profile, exc, known, CONNECT_TIMEOUT)

    unknown = connect_error(
        paramiko.SSHException("Server '[10.251.0.2]:2222' not found in known_hosts")
    )
    assert isinstance(unknown, SetupError)  # exit 7: cron retrying it cannot help
    assert SetupError.exit_code != RemoteError.exit_code
    text = str(unknown)
    assert "\n" not in text
    assert "[10.251.0.2]:2222 is not in" in text
    assert f"ssh-keyscan -p 2222 10.251.0.2 >> {known}" in text
    assert "fingerprint" in text
    key = paramiko.RSAKey.generate(1024)
    changed = connect_error(paramiko.BadHostKeyException("h", key, key))
    assert "does not match" in str(changed) and "ssh-keygen -R" in str(changed)
    assert isinstance(changed, SetupError)
    refused = connect_error(
        paramiko.ssh_exception.NoValidConnectionsError({("10.251.0.2", 2222): OSError()})
    )
    assert str(refused) == "cannot connect to 10.251.0.2:2222: connection refused"
    assert type(refused) is RemoteError  # the site may come back: exit 3, retried
    timed_out = connect_error(TimeoutError())
    assert "10.251.0.2:2222" in str(timed_out) and type(timed_out) is RemoteError
    auth = connect_error(paramiko.AuthenticationException("no"))
    assert str(auth).startswith("cannot log in to hpcuser@10.251.0.2:2222")
    assert isinstance(auth, SetupError) and "identity_file" in str(auth)


def test_helper_command_is_one_line() -> None:
    command = helper_command("scan", "/a/b")
    assert "\n" not in command and command.startswith("python3 -I -c ")


# ---- the carrier seam: SiteConnection over a carrier that runs commands here


class LocalCarrier:
    """A `Carrier` whose "site" is this machine: each command runs in a local shell. The
    transfer driver, the helper and the checks run for real; only SSH is left out."""

    address = "localhost:0"

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def exec(self, command: str, *, feed=None, consume=None, timeout=None) -> RunResult:
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        # Its own process group: ending the command ends what the shell started too (as
        # sshd ends a session's processes), else a helper left writing keeps the pipes
        # open, and this process's reader threads with them, for ever.
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )

        def end_command() -> None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        assert proc.stdin and proc.stdout and proc.stderr
        failures: list[BaseException] = []
        errors: list[bytes] = []

        def feeder() -> None:
            try:
                if feed is not None:
                    feed(proc.stdin.write)
            except BrokenPipeError:
                pass  # the command stopped reading: its exit status and stderr say why
            except BaseException as exc:
                failures.append(exc)
                end_command()  # as a dropped channel: the command gets no more input
            finally:
                proc.stdin.close()

        threads = [
            threading.Thread(target=feeder),
            threading.Thread(target=lambda: errors.append(proc.stderr.read())),
        ]
        for thread in threads:
            thread.start()
        stdout = b""
        if consume is not None:
            try:
                consume(proc.stdout)
            except BaseException:
                end_command()  # as the carriers do: the command ends with its reader
                for thread in threads:
                    thread.join()
                proc.wait()
                raise
        else:
            stdout = proc.stdout.read()
        for thread in threads:
            thread.join()
        exited = proc.wait(timeout)
        if failures:
            raise failures[0]
        return RunResult(command, stdout.decode(), errors[0].decode(), exited)


class Recorder(Progress):
    """What a transfer reported: (label, total, bytes advanced) per start, and finishes."""

    def __init__(self) -> None:
        self.tasks: list[list] = []
        self.finished = 0

    def start(self, label: str, total: int) -> None:
        self.tasks.append([label, total, 0])

    def advance(self, n: int) -> None:
        self.tasks[-1][2] += n

    def finish(self) -> None:
        self.finished += 1


def test_a_second_carrier_carries_uploads_downloads_and_commands(profile, tmp_path) -> None:
    src, site, back = tmp_path / "src", tmp_path / "site", tmp_path / "back"
    (src / "sub dir").mkdir(parents=True)
    (src / "sub dir/a.txt").write_bytes(b"hello\n")
    (src / "run.sh").write_bytes(b"#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    files = [entry_for(src, "run.sh"), entry_for(src, "sub dir/a.txt")]
    total = sum(f.size for f in files)
    conn = SiteConnection(profile, carrier=LocalCarrier())
    assert conn.address == "localhost:0"

    shown = Recorder()
    report = conn.upload(src, str(site), files, progress=shown)
    assert (report.sent_files, report.sent_bytes) == (2, total)
    assert (shown.tasks, shown.finished) == ([["uploading", total, total]], 1)
    assert conn.run(f"{site}/run.sh").stdout == "ran\n"
    again = conn.upload(src, str(site), files)
    assert (again.sent_files, again.skipped_files) == (0, 2)

    shown = Recorder()
    got = conn.download(str(site), back, progress=shown)
    assert (got.sent_files, got.sent_bytes) == (2, total)
    assert (shown.tasks, shown.finished) == ([["downloading", total, total]], 1)
    assert [entry_for(back, f.path) for f in files] == files

    conn.put_bytes(b"put\n", f"{site}/bin/tool", 0o750)
    assert (site / "bin/tool").read_bytes() == b"put\n"
    assert oct((site / "bin/tool").stat().st_mode & 0o777) == "0o750"
    with pytest.raises(RemoteError, match=r"failed \(exit 7\): oops"):
        conn.run("echo oops >&2; exit 7")


def test_a_failed_transfer_still_finishes_its_progress(profile, tmp_path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "big").write_bytes(b"x" * 100)
    shown = Recorder()
    with pytest.raises(RemoteError, match="over the cap"):
        SiteConnection(profile, carrier=LocalCarrier()).download(
            str(site), tmp_path / "back", progress=shown, limits=Limits(job_bytes=10)
        )
    assert shown.tasks == []  # refused before anything moved
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"changed")
    stale = FileEntry("f", 7, sha(b"original"), False)
    with pytest.raises(BadInput, match="sha256 differs from the manifest"):
        SiteConnection(profile, carrier=LocalCarrier()).upload(
            src, str(tmp_path / "up"), [stale], progress=shown
        )
    assert (shown.tasks, shown.finished) == ([["uploading", 7, 7]], 1)
