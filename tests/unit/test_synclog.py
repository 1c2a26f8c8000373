"""What sync tells a monitor: the round's summary, and its log file rotated by size."""

from __future__ import annotations

import json

from click.testing import CliRunner

from lumberjack.cli import cli, synclog


def test_summary_tells_progress_from_nothing_to_do():
    results = [
        {"name": "a", "phase": "shipped", "steps": ["exported"]},
        {"name": "b", "phase": "running", "steps": []},
        {"name": "c", "phase": "running", "steps": ["busy: skipped"]},
        {"name": "d", "phase": "launched", "error": "site down", "exit_code": 3},
    ]
    got = synclog.summary(results, ["old"], 3)
    assert got == {
        "progress": True,
        "advanced": ["a"],
        "busy": ["c"],
        "errors": ["d"],
        "rolled_back": ["old"],
        "exit_code": 3,
    }
    assert synclog.summary(results[1:3], [], 0)["progress"] is False


def test_the_log_gets_one_line_per_round_and_rotates(tmp_path, monkeypatch):
    monkeypatch.setattr(synclog, "MAX_BYTES", 400)
    log = tmp_path / "logs" / "sync.log"
    for round_ in range(40):
        synclog.append(log, {"ok": True, "round": round_})
    names = sorted(p.name for p in log.parent.iterdir())
    assert names == ["sync.log", *(f"sync.log.{i}" for i in range(1, synclog.BACKUPS + 1))]
    assert all(p.stat().st_size <= 400 for p in log.parent.iterdir())
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    last = [json.loads(line) for line in log.read_text().splitlines()]
    assert last[-1]["round"] == 39 and "time" in last[-1]
    older = [
        json.loads(line)["round"] for line in (log.parent / "sync.log.1").read_text().splitlines()
    ]
    assert older[-1] == last[0]["round"] - 1  # nothing lost between the two files


def test_an_unwritable_log_is_one_line_and_changes_no_exit_code(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")  # a file where the log's directory should be
    monkeypatch.setenv("LUMBERJACK_STATE_DIR", str(tmp_path / "state"))
    log = tmp_path / "file" / "sync.log"
    result = CliRunner().invoke(cli, ["sync", "--json", "--log-file", str(log)])
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"cannot write the sync log {log}")
    assert len(result.stderr.splitlines()) == 1
    assert json.loads(result.stdout)["ok"] is True


def test_a_log_that_is_a_link_is_refused_in_one_line(tmp_path, capsys):
    target = tmp_path / "elsewhere"
    target.write_text("keep\n")
    (tmp_path / "sync.log").symlink_to(target)
    synclog.append(tmp_path / "sync.log", {"ok": True})
    assert capsys.readouterr().err.startswith("cannot write the sync log")
    assert target.read_text() == "keep\n"


def test_sync_with_log_file_on_an_empty_ledger(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMBERJACK_STATE_DIR", str(tmp_path / "state"))
    log = tmp_path / "sync.log"
    result = CliRunner().invoke(cli, ["sync", "--json", "--log-file", str(log)])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["summary"]["progress"] is False and answer["summary"]["exit_code"] == 0
    logged = json.loads(log.read_text())
    assert {k: v for k, v in logged.items() if k != "time"} == answer
