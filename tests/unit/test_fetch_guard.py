"""A download takes from the site only regular files of one name with safe names, within
the caps of core.returns: bad entries are skipped and reported (never written), a cap
stops the download at once. The helper and the driver run for real (the "site" is a
directory on this machine, reached through a local shell instead of SSH)."""

from __future__ import annotations

import io
import json
import os
import socket
import stat
from pathlib import Path

import pytest
from test_transport import REPO, LocalCarrier, Recorder, frame, run_helper

from lumberjack.core import returns
from lumberjack.core.returns import Limits
from lumberjack.errors import BadInput
from lumberjack.profiles.sites import load_profile
from lumberjack.site import transfer_helper
from lumberjack.transport import SiteConnection
from lumberjack.transport.states import Step
from lumberjack.transport.transfer import ReturnGuard, ReturnRefused

JOB0 = "7/0/cluster7.proc0.subproc0"
JOB1 = "7/1/cluster7.proc1.subproc0"


@pytest.fixture
def conn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SiteConnection:
    monkeypatch.setenv("LUMBERJACK_TESTBED_DIR", str(tmp_path))
    return SiteConnection(load_profile(REPO / "site-profiles" / "testbed.toml"),
                          carrier=LocalCarrier())  # fmt: skip


def spool(tmp_path: Path) -> Path:
    """A returned spool at the "site": the queue and two jobs' outputs."""
    root = tmp_path / "site"
    for job in (JOB0, JOB1):
        (root / job).mkdir(parents=True)
        (root / job / "_condor_stdout").write_bytes(b"out\n")
    (root / "job_queue.log").write_bytes(b"107 1 CreationTimestamp 1\n")
    return root


def plant_hostile(job: Path) -> dict[str, str]:
    """Every kind of entry a download must skip; name -> reason."""
    (job / "bad\x1b[2Jname").write_bytes(b"evil")
    os.symlink("/etc/passwd", job / "link")
    os.mkfifo(job / "fifo")
    # Bound by a relative name: the full temporary path can pass AF_UNIX's 108 bytes
    # (pytest-xdist adds a directory level per worker).
    here = os.getcwd()
    os.chdir(job)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind("sock")
    finally:
        os.chdir(here)
    (job / "twin").write_bytes(b"twin")
    os.link(job / "twin", job / "twin2")
    os.mkdir(job / b"dir\xff".decode("utf-8", "surrogateescape"))
    (job / b"dir\xff/inner".decode("utf-8", "surrogateescape")).write_bytes(b"x")
    hard = "has other hard links (maybe to a file outside the spool)"
    reasons = {
        "bad\x1b[2Jname": "unsafe name (contains a control character)",
        "link": "is a symbolic link", "fifo": "is a FIFO", "sock": "is a socket",
        "twin": hard, "twin2": hard,
        b"dir\xff/inner".decode("utf-8", "surrogateescape"): "unsafe name (is not UTF-8)",
    }  # fmt: skip
    if os.geteuid() == 0:
        os.mknod(job / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        reasons["null"] = "is a device"
    return reasons


def odd_entries(root: Path) -> list[str]:
    found = []
    for path in root.rglob("*"):
        st = os.lstat(path)
        if not (stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1)):
            found.append(path.name)
    return found


def test_bad_entries_are_skipped_and_reported_never_written(conn, tmp_path: Path) -> None:
    site = spool(tmp_path)
    reasons = plant_hostile(site / JOB0)
    back = tmp_path / "back"
    report = conn.download(str(site), back, limits=Limits())
    assert dict(report.bad_entries) == {f"{JOB0}/{name}": why for name, why in reasons.items()}
    assert sorted(p.relative_to(back).as_posix() for p in back.rglob("*") if p.is_file()) == [
        f"{JOB0}/_condor_stdout", f"{JOB1}/_condor_stdout", "job_queue.log",
    ]  # fmt: skip
    assert odd_entries(back) == [] and report.sent_files == 3
    again = conn.download(str(site), back, limits=Limits())  # the same answer every time
    assert (again.sent_files, len(again.bad_entries)) == (0, len(reasons))


@pytest.mark.parametrize(
    ("caps", "files", "why"),
    [
        ({"job_bytes": 1 << 30}, {"huge": 2 << 30},
         "returns 2147483680 bytes, over the cap of 1073741824 bytes per job "
         "(LUMBERJACK_RETURN_MAX_JOB_BYTES)"),
        ({"job_bytes": 100}, {"a": 60, "b": 60},
         "returns 152 bytes, over the cap of 100 bytes per job"),
        ({"job_files": 2}, {"a": 1, "b": 1},
         "returns 4 files, over the cap of 2 files per job (LUMBERJACK_RETURN_MAX_JOB_FILES)"),
    ],
)  # fmt: skip
def test_a_job_over_a_per_job_cap_stays_at_the_site_and_the_rest_comes_home(
    conn, tmp_path: Path, caps: dict, files: dict, why: str
) -> None:
    site = spool(tmp_path)
    (site / JOB0 / "events.log").write_bytes(b"000 (007.000.000) submitted\n")
    for name, size in files.items():
        with open(site / JOB0 / name, "wb") as out:
            out.truncate(size)  # sparse: large on paper, cheap on disk
    back = tmp_path / "back"
    report = conn.download(str(site), back, limits=Limits(**caps), job_log="events.log")
    assert list(report.over_cap) == ["7.0"] and why in report.over_cap["7.0"]
    # Its events come home (import writes the hold after them), nothing else of it.
    assert sorted(p.relative_to(back).as_posix() for p in back.rglob("*") if p.is_file()) == [
        f"{JOB0}/events.log", f"{JOB1}/_condor_stdout", "job_queue.log",
    ]  # fmt: skip
    again = conn.download(str(site), back, limits=Limits(**caps), job_log="events.log")
    assert (again.sent_files, again.over_cap) == (0, report.over_cap)


def test_an_export_over_its_cap_stops_the_download_before_anything_moves(
    conn, tmp_path: Path
) -> None:
    site = spool(tmp_path)
    for name in (f"{JOB0}/a", f"{JOB1}/b"):
        with open(site / name, "wb") as out:
            out.truncate(60)
    shown = Recorder()
    with pytest.raises(ReturnRefused, match="over the cap") as refused:
        conn.download(str(site), tmp_path / "back", progress=shown,
                      limits=Limits(total_bytes=100))  # fmt: skip
    message = ("the export returns more than 100 bytes, over the cap of 100 bytes per export "
               "(LUMBERJACK_RETURN_MAX_TOTAL_BYTES); nothing more fetched")  # fmt: skip
    assert message in str(refused.value)
    assert shown.tasks == [] and not (tmp_path / "back" / JOB0 / "a").exists()


def test_the_caps_come_from_the_environment_under_either_name() -> None:
    env = {"LUMBERJACK_IMPORT_MAX_JOB_BYTES": "10", "LUMBERJACK_RETURN_MAX_TOTAL_BYTES": "20"}
    limits = Limits.from_env(environ=env)
    assert (limits.job_bytes, limits.job_bytes_var) == (10, "LUMBERJACK_IMPORT_MAX_JOB_BYTES")
    assert (limits.total_bytes, limits.total_bytes_var) == (20, returns.MAX_TOTAL_BYTES_ENV)
    assert limits.job_files == returns.DEFAULT_MAX_JOB_FILES
    both = {"LUMBERJACK_RETURN_MAX_JOB_BYTES": "5", "LUMBERJACK_IMPORT_MAX_JOB_BYTES": "10"}
    assert Limits.from_env(environ=both).job_bytes == 5  # the new name wins
    with pytest.raises(BadInput, match="LUMBERJACK_RETURN_MAX_JOB_FILES must not be negative"):
        Limits.from_env(BadInput, {"LUMBERJACK_RETURN_MAX_JOB_FILES": "-1"})


def test_job_of_a_spool_path() -> None:
    assert returns.job_of(f"{JOB0}/out/x") == "7.0" and returns.job_of(JOB1) == "7.1"
    assert returns.job_of("job_queue.log") is None
    assert returns.job_of("7/1/cluster8.proc1.subproc0/x") is None


# ---- the site's end: what it sends, skips and never reads


def test_the_helper_skips_what_changed_and_never_reads_a_file_over_the_cap(
    tmp_path: Path,
) -> None:
    root = tmp_path / "site"
    root.mkdir()
    (root / "ok").write_bytes(b"fine")
    os.mkfifo(root / "was-a-file")  # swapped in after the listing: must not block
    (root / "twin").write_bytes(b"t")
    os.link(root / "twin", root / "twin2")
    with open(root / "huge", "wb") as out:
        out.truncate(1 << 30)
    request = {"files": [[n, 0, None] for n in ("ok", "was-a-file", "twin", "huge", "gone")],
               "max_size": 1000}  # fmt: skip
    done = run_helper("send", root, json.dumps(request).encode())
    assert done.returncode == 0, done.stderr
    stream = io.BytesIO(done.stdout)
    heads = []
    while line := stream.readline():
        heads.append(json.loads(line))
        stream.read(heads[-1].get("n", 0))
    assert heads == [
        {"p": "ok", "o": 0, "n": 4, "x": False},
        {"p": "was-a-file", "skip": "is a FIFO"},
        {"p": "twin", "skip": "has other hard links (maybe to a file outside the spool)"},
        {"p": "huge", "over": 1 << 30},
        {"p": "gone", "skip": "No such file or directory"},
        {"end": True},
    ]


def test_the_scan_lists_special_files_by_kind_and_links_without_reading_big_files(
    tmp_path: Path,
) -> None:
    root = tmp_path / "site"
    root.mkdir()
    os.mkfifo(root / "fifo")
    (root / "twin").write_bytes(b"t")
    os.link(root / "twin", root / "twin2")
    with open(root / "huge", "wb") as out:
        out.truncate(5000)
    done = run_helper("scan", root, json.dumps({"max_size": 1000}).encode())
    listed = {item[1]: item for item in map(json.loads, done.stdout.decode().splitlines())}
    assert listed["fifo"][0] == "p" and listed["twin"][5] == 2 and listed["huge"][4] is None


# ---- the access point's end: every frame of the site's stream checked


def guard(steps: list[Step], limits: Limits | None = None) -> ReturnGuard:
    checked = ReturnGuard(limits or Limits(), "site")
    checked.expect(steps, [])
    return checked


def receive(tmp_path: Path, stream: bytes, checked: ReturnGuard) -> None:
    transfer_helper.receive(str(tmp_path / "back"), io.BytesIO(stream), guard=checked)


def test_frames_not_asked_for_or_longer_than_listed_are_refused(tmp_path: Path) -> None:
    step = Step("a", 0, 4, False, "0" * 64)
    with pytest.raises(transfer_helper.Bad, match="'other', which was not asked for"):
        receive(tmp_path, frame("other", b"data"), guard([step]))
    with pytest.raises(transfer_helper.Bad, match="listed at 4 bytes"):
        receive(tmp_path, frame("a", b"longer"), guard([step]))
    with pytest.raises(ReturnRefused, match="is now 9999 bytes"):
        receive(tmp_path, b'{"p": "a", "over": 9999}\n', guard([step]))
    assert not (tmp_path / "back" / "a").exists()


def test_skip_frames_are_kept_and_bytes_are_counted_as_they_arrive(tmp_path: Path) -> None:
    steps = [Step(f"{JOB0}/a", 0, 4, False, "0" * 64), Step(f"{JOB0}/b", 0, 4, False, "0" * 64)]
    checked = guard(steps)
    stream = b'{"p": "%s/a", "skip": "is a FIFO"}\n' % JOB0.encode()
    receive(tmp_path, stream + frame(f"{JOB0}/b", b"data") + b'{"end": true}\n', checked)
    assert checked.skipped == [(f"{JOB0}/a", "skipped by the site: is a FIFO")]
    assert checked.job_bytes == {"7.0": 4} and checked.total == 4
    # Counted as they arrive: past the cap the bytes are refused before they are written.
    tight = guard([Step(f"{JOB0}/c", 0, 4, False, "0" * 64)], Limits(total_bytes=3))
    with pytest.raises(ReturnRefused, match="more than 3 bytes"):
        receive(tmp_path, frame(f"{JOB0}/c", b"data"), tight)
    assert (tmp_path / "back" / JOB0 / "c").stat().st_size == 0


def test_fetch_says_which_jobs_it_left_at_the_site_and_why() -> None:
    from lumberjack.cli.steps_cmd import _summary

    why = "returns 9 bytes, over the cap of 1 bytes per job (LUMBERJACK_RETURN_MAX_JOB_BYTES)"
    text = _summary({"received_files": 3, "over_cap": {"7.0": why}, "skipped": []})
    assert text.splitlines()[-1] == f"  left at the site, held at import: 7.0 {why}"
    assert "over_cap" not in _summary({"received_files": 3, "over_cap": {}, "skipped": []})
