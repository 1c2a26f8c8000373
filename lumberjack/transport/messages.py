"""Shared sizes and the one-line wording of remote commands and their failures."""

from __future__ import annotations

import shlex

from lumberjack.core.message_text import shortened
from lumberjack.transport.helper import HELPER_PROGRAM

CHUNK = 256 * 1024  # bytes per read/send: big enough to keep the channel busy


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "no error message")[:300]


def short(command: str) -> str:
    """A command as a message shows it: the helper's program as <helper>, at most 80."""
    if HELPER_PROGRAM in command:
        command = command.replace(shlex.quote(HELPER_PROGRAM), "<helper>")
    return shortened(command, 80)
