"""The one progress display: a bar on stderr for copying, uploading and downloading.

Shown only to a person: not when stdout carries JSON for a script, and not when stderr
is no terminal (a log file gets no bar lines). It implements the transfer driver's
`Progress` (start, advance, finish) by its shape, so the command line does not import
the SSH stack just to draw a bar.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click


class Bar:
    """A click progress bar on bytes, one task at a time."""

    def __init__(self) -> None:
        self._bar: Any = None

    def start(self, label: str, total: int) -> None:
        self.finish()
        if total > 0:
            self._bar = click.progressbar(length=total, label=label, file=sys.stderr)
            self._bar.__enter__()

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

    @contextmanager
    def task(self, label: str, total: int) -> Iterator[Callable[[int], None]]:
        """`with bar.task(label, total) as advance:` for code that reports byte counts."""
        self.start(label, total)
        try:
            yield self.advance
        finally:
            self.finish()


class _Hidden(Bar):
    def start(self, label: str, total: int) -> None:
        pass


def for_command(as_json: bool) -> Bar:
    """The display for this command: a bar when a person watches stderr, else nothing."""
    return Bar() if not as_json and sys.stderr.isatty() else _Hidden()
