"""`condor_lumberjack inspect FILE`: the table, --json, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import lumberjack.cli.inspect_cmd  # noqa: F401  (registers the command on `cli`)
from lumberjack.cli import cli
from lumberjack.core import jobqueuelog

LOG = (
    "107 1 CreationTimestamp 1718000000\n"
    "101 0.0 Job Machine\n"
    "105 \n"
    "103 0.0 NextClusterNum 3\n"
    "101 01.-1 Job Machine\n"
    "101 1.-2 ClusterPvt (empty)\n"
    '103 01.-1 Owner "alice"\n'
    '103 01.-1 Cmd "/bin/echo"\n'
    '103 01.-1 Iwd "/home/alice/run dir"\n'
    "101 1.0 Job Machine\n"
    "103 1.0 JobStatus 1\n"
    '103 1.0 Args "a \\"quoted\\" \\\\ back"\n'
    "101 1.1 Job Machine\n"
    "103 1.1 JobStatus 2\n"
    '103 1.1 Iwd "/home/alice/ünïcødé dir"\n'
    '103 1.1 Managed "External"\n'
    '103 1.1 ManagedManager "lumberjack"\n'
    "101 02.-1 Job Machine\n"
    "101 2.0 Job Machine\n"
    "106 \n"
    "105 \n"
    "102 2.0\n"
    "102 02.-1\n"
    '103 1.0 HoldReason "via \\"condor_hold\\""\n'
    "103 1.0 JobStatus 5\n"
    "106 \n"
    "105 \n"
    "103 1.1 JobStatus 4\n"
)


@pytest.fixture()
def log_file(tmp_path: Path) -> Path:
    path = tmp_path / "job_queue.log"
    path.write_text(LOG, encoding="utf-8")
    return path


def _run(*args: str):
    return CliRunner().invoke(cli, ["inspect", *args], catch_exceptions=False)


def test_inspect_is_registered() -> None:
    assert "inspect" in cli.commands


def test_table(log_file: Path) -> None:
    result = _run(str(log_file))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"{log_file}: 1 cluster, 2 procs (1 Held, 1 Running)"
    assert lines[1].split() == ["ID", "STATUS", "OWNER", "CMD", "ARGS", "IWD", "MANAGED"]
    row0, row1 = lines[2], lines[3]
    assert row0.startswith("1.0 ") and "Held" in row0 and "alice" in row0
    assert "/bin/echo" in row0 and "/home/alice/run dir" in row0  # from the cluster ad
    assert 'a "quoted" \\\\ back' in row0
    assert row1.startswith("1.1 ") and "Running" in row1  # the open transaction is dropped
    assert "/home/alice/ünïcødé dir" in row1 and "External (lumberjack)" in row1
    assert "2.0" not in result.stdout  # destroyed
    assert result.stderr == ""


def test_json_is_one_object_with_every_ad_exactly_as_in_the_file(log_file: Path) -> None:
    result = _run("--json", str(log_file))
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 1
    data = json.loads(result.stdout)
    assert list(data) == ["ads"]
    ads = data["ads"]
    assert list(ads) == ["0.0", "01.-1", "1.-2", "1.0", "1.1"]
    assert ads["0.0"] == {"NextClusterNum": "3"}
    assert ads["1.-2"] == {}  # MyType/TargetType are not attributes
    assert ads["01.-1"] == {
        "Owner": '"alice"',
        "Cmd": '"/bin/echo"',
        "Iwd": '"/home/alice/run dir"',
    }
    assert ads["1.0"] == {
        "JobStatus": "5",
        "Args": '"a \\"quoted\\" \\\\ back"',
        "HoldReason": '"via \\"condor_hold\\""',
    }
    assert ads["1.1"]["JobStatus"] == "2"
    assert ads["1.1"]["Iwd"] == '"/home/alice/ünïcødé dir"'


def test_json_keeps_undecodable_bytes_and_carriage_returns(tmp_path: Path) -> None:
    path = tmp_path / "job_queue.log"
    path.write_bytes(b'101 1.0 Job Machine\n103 1.0 Blob "\xff\xfe"\r\n')
    result = _run("--json", str(path))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"ads": {"1.0": {"Blob": '"\udcff\udcfe"\r'}}}
    table = _run(str(path))
    assert table.exit_code == 0 and "1 cluster, 1 proc (1 Unknown)" in table.stdout


def test_empty_log_is_an_empty_queue(tmp_path: Path) -> None:
    path = tmp_path / "job_queue.log"
    path.write_bytes(b"")
    result = _run(str(path))
    assert result.exit_code == 0
    assert result.stdout == f"{path}: 0 clusters, 0 procs\n"
    assert json.loads(_run("--json", str(path)).stdout) == {"ads": {}}


def test_cluster_without_procs_gets_a_row(tmp_path: Path) -> None:
    path = tmp_path / "job_queue.log"
    path.write_text('101 07.-1 Job Machine\n103 07.-1 Owner "bob"\n', encoding="utf-8")
    result = _run(str(path))
    assert result.exit_code == 0
    assert "1 cluster, 0 procs" in result.stdout
    assert result.stdout.splitlines()[2].split()[:3] == ["7", "(no", "procs)"]


def _assert_one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2
    assert result.stdout == ""
    err = result.stderr
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1
    for fragment in fragments:
        assert fragment in err


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "job_queue.log"
    _assert_one_line_error(_run(str(path)), str(path), "no such file")


def test_directory(tmp_path: Path) -> None:
    _assert_one_line_error(_run(str(tmp_path)), str(tmp_path), "is a directory")


def test_unreadable_file(log_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # we run as root in CI, where chmod 000 does not stop a read: fake the refusal
    def refuse(handle: object, path: str, **_: object) -> None:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(jobqueuelog, "parse_file", refuse)
    _assert_one_line_error(_run(str(log_file)), str(log_file), "permission denied")


def test_other_os_error(log_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(handle: object, path: str, **_: object) -> None:
        raise OSError(5, "Input/output error", path)

    monkeypatch.setattr(jobqueuelog, "parse_file", broken)
    _assert_one_line_error(_run(str(log_file)), str(log_file), "Input/output error")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("101 1.0 Job Machine\n103 1.0 Name\n", 2),
        ("101 1.0 Job Machine\n\n103 1.0 A 1\n", 2),
        ("105 \n106 \n106 \n", 3),
        ("101 1.0 Job Machine\n103 2.0 A 1\n", 2),
        ("107 1 CreationTimestamp 1\n101 1.0 Job Machine\nGARBAGE here\n", 3),
    ],
)
def test_malformed_log(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "job_queue.log"
    path.write_text(text, encoding="utf-8")
    _assert_one_line_error(_run(str(path)), f"error: {path} line {line}: ")


def test_malformed_log_with_json_prints_one_json_error(tmp_path: Path) -> None:
    path = tmp_path / "job_queue.log"
    path.write_text("101 1.0 Job Machine\n999 1.0\n", encoding="utf-8")
    result = _run("--json", str(path))
    assert result.exit_code == 2
    assert result.stdout.count("\n") == 1
    data = json.loads(result.stdout)
    assert data["ok"] is False
    assert data["error"].startswith(f"{path} line 2: unknown op code 999")


def test_help_has_an_example() -> None:
    result = CliRunner().invoke(cli, ["inspect", "--help"])
    assert result.exit_code == 0
    assert "Examples:" in result.stdout
    assert "condor_lumberjack inspect " in result.stdout
    assert "--json" in result.stdout


def test_relative_path(log_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(os.fspath(log_file.parent))
    result = _run("job_queue.log")
    assert result.exit_code == 0
    assert result.stdout.startswith("job_queue.log: 1 cluster, 2 procs")


def test_binary_file_is_one_short_line(tmp_path: Path) -> None:
    path = tmp_path / "a.out"
    path.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 8)
    result = _run(str(path))
    _assert_one_line_error(result, f"{path} line 1: binary data, not a job_queue.log")
    assert result.stderr == f"error: {path} line 1: binary data, not a job_queue.log\n"


def test_bad_line_shows_what_is_wrong_once_and_a_short_excerpt(tmp_path: Path) -> None:
    path = tmp_path / "job_queue.log"
    long_value = "x" * 500
    path.write_text(f"101 1.0 Job Machine\n103 1.0 {long_value}\n", encoding="utf-8")
    result = _run(str(path))
    _assert_one_line_error(result, f"{path} line 2: 103 (set attribute) needs KEY NAME VALUE: ")
    excerpt = result.stderr.rstrip("\n").split("VALUE: ", 1)[1]
    assert excerpt == '"103 1.0 ' + "x" * 49 + '..."'  # 60 characters of the line, quoted
    assert result.stderr.count("103 1.0") == 1
