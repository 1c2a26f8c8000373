"""What `sync` tells a monitor: a summary of one round, and its log file (`--log-file`),
one JSON line per round, rotated by size so that a crontab entry running every minute
never fills the disk (no logrotate needed)."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

import click

#: The log is rotated past this size: PATH -> PATH.1 -> ... -> PATH.<BACKUPS>.
MAX_BYTES = 10 * 2**20
BACKUPS = 5


def summary(results: list[dict[str, Any]], rolled_back: list[str], code: int) -> dict[str, Any]:
    """Which exports moved, which waited, which failed this round, and which wait for a
    person: `progress` tells "something moved" from "nothing to do" (both exit 0)."""
    advanced = [r["name"] for r in results if set(r.get("steps", [])) - {"busy: skipped"}]
    busy = [r["name"] for r in results if r.get("steps") == ["busy: skipped"]]
    errors = [r["name"] for r in results if r.get("error")]
    return {
        "progress": bool(advanced),
        "advanced": advanced,
        "busy": busy,
        "errors": errors,
        # rolled back: the jobs are home; a person looks, then `cleanup` (or `unexport`)
        "rolled_back": rolled_back,
        "exit_code": code,
    }


def append(path: Path, answer: dict[str, Any]) -> None:
    """Append one round to `path`; a log that cannot be written is said on stderr in one
    line and does not change what sync did or its exit code."""
    line = json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **answer}, default=str)
    data = (line + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # two syncs at once rotate once
            if os.fstat(fd).st_size and os.fstat(fd).st_size + len(data) > MAX_BYTES:
                _rotate(path)
                os.close(fd)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        click.echo(f"cannot write the sync log {path}: {exc.strerror or exc}", err=True)


def _rotate(path: Path) -> None:
    for index in range(BACKUPS - 1, 0, -1):
        older = path.with_name(f"{path.name}.{index}")
        if older.exists():
            older.replace(path.with_name(f"{path.name}.{index + 1}"))
    path.replace(path.with_name(f"{path.name}.1"))
