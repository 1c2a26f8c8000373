"""A record of every message that crosses the SSH link, for tests: with
LUMBERJACK_RECORD_LINK set to a file, each plan the access point writes to the site and
each answer of the site agent is appended to it as one JSON line {"kind", "text"}
(the text exactly as it crossed). Unset (always, outside tests): nothing is written.
"""

from __future__ import annotations

import json
import os

ENV = "LUMBERJACK_RECORD_LINK"


def record(kind: str, text: str | bytes) -> None:
    """Append one message of `kind` (an agent verb, or a contract file's name)."""
    path = os.environ.get(ENV)
    if not path:
        return
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"kind": kind, "text": text}) + "\n")
