"""Every message that crosses the SSH link in a real journey, decoded through the
contract: `record_link` makes the journey's CLI runs write each message as it crossed
(transport/recording.py), `every_message_decodes` reads each strictly, checks it is
refused in one line once it carries a field the contract does not know, and that every
kind the journey is known to send was seen (any other is decoded as strictly)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lumberjack.core.answers import MESSAGES, read_message
from lumberjack.core.records import ContractError
from lumberjack.transport import recording


def record_link(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The file the journey's messages go to (the CLI's runs inherit the variable)."""
    recorded = tmp_path / "link.jsonl"
    monkeypatch.setenv(recording.ENV, str(recorded))
    return recorded


def every_message_decodes(recorded: Path, expected: set[str]) -> None:
    assert expected <= set(MESSAGES), expected - set(MESSAGES)
    seen = set()
    for line in recorded.read_text().splitlines():
        message = json.loads(line)
        kind, text = message["kind"], message["text"]
        read_message(kind, text)  # ContractError: unknown, missing or mistyped field
        tampered = json.dumps({**json.loads(text), "surprise": 1})
        with pytest.raises(ContractError, match="unknown field 'surprise'") as refused:
            read_message(kind, tampered)
        assert "\n" not in str(refused.value)
        seen.add(kind)
    assert expected <= seen, f"never seen: {sorted(expected - seen)}"
