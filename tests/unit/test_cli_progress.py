"""The progress display is for a person: nothing on a pipe, nothing beside JSON."""

from __future__ import annotations

import pytest

from lumberjack.cli.progress import for_command


@pytest.mark.parametrize("as_json", [True, False])
def test_no_bar_when_stderr_is_no_terminal_or_stdout_is_json(as_json, capsys) -> None:
    display = for_command(as_json)  # pytest's captured stderr is no terminal
    with display.task("copying inputs", 100) as advance:
        advance(60)
        advance(40)
    display.start("uploading", 10)
    display.advance(10)
    display.finish()
    assert capsys.readouterr() == ("", "")
