"""`inspect --diff A B`: what a site changed, ad by ad, attribute by attribute."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

import lumberjack.cli.inspect_cmd  # noqa: F401  (registers the command on `cli`)
from lumberjack.cli import cli
from lumberjack.core import jobqueuelog as jql
from lumberjack.core import jobqueuelog_write as jqlw


def two_logs(tmp_path: Path) -> tuple[Path, Path]:
    sent = {
        "01.-1": jql.Ad("01.-1", "Job", "Machine", {"Cmd": '"/bin/true"', "Owner": '"alice"'}),
        "1.0": jql.Ad("1.0", "Job", "Machine", {"JobStatus": "1", "Out": '"out"'}),
    }
    back = {
        "01.-1": jql.Ad("01.-1", "Job", "Machine", {"Cmd": '"/bin/evil"', "Owner": '"alice"'}),
        "1.0": jql.Ad("1.0", "Job", "Machine", {"JobStatus": "4", "ExitCode": "0"}),
        "2.0": jql.Ad("2.0", "Job", "Machine", {"JobStatus": "1"}),
    }
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    jqlw.write_log(a, sent)
    jqlw.write_log(b, back)
    return a, b


def test_diff_json_lists_every_changed_attribute(tmp_path: Path) -> None:
    a, b = two_logs(tmp_path)
    result = CliRunner().invoke(cli, ["inspect", "--diff", str(a), str(b), "--json"])
    assert result.exit_code == 0, result.output
    ads = json.loads(result.output)["ads"]
    assert ads["01.-1"] == {"attrs": {"Cmd": ['"/bin/true"', '"/bin/evil"']}}
    assert ads["1.0"]["attrs"] == {
        "ExitCode": [None, "0"],
        "JobStatus": ["1", "4"],
        "Out": ['"out"', None],
    }
    assert ads["2.0"] == {"only_in": "b"}
    assert "0.0" not in ads  # the same in both


def test_diff_text_is_one_row_per_attribute(tmp_path: Path) -> None:
    a, b = two_logs(tmp_path)
    result = CliRunner().invoke(cli, ["inspect", "--diff", str(a), str(b)])
    lines = result.output.splitlines()
    assert lines[0].split()[:2] == ["AD", "ATTRIBUTE"]
    assert any(line.split()[:4] == ["1.0", "JobStatus", "1", "4"] for line in lines)
    assert any(line.split()[:2] == ["2.0", "(whole"] for line in lines)


def test_same_logs_and_a_missing_second_file(tmp_path: Path) -> None:
    a, _ = two_logs(tmp_path)
    same = CliRunner().invoke(cli, ["inspect", "--diff", str(a), str(a)])
    assert "the same ads" in same.output
    alone = CliRunner().invoke(cli, ["inspect", "--diff", str(a)])
    assert alone.exit_code != 0
