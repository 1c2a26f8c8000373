"""What every command shares: --json output, one-line errors, exit codes."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, TypeVar

import click

from lumberjack.errors import LumberjackError

F = TypeVar("F", bound=Callable[..., Any])


class LumberjackGroup(click.Group):
    """A click group that turns LumberjackError into `error: ...` and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LumberjackError as exc:
            if ctx.meta.get("lumberjack.json"):
                click.echo(json.dumps({"ok": False, "error": str(exc)}))
            else:
                click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)


def json_option(func: F) -> F:
    """Add --json: print one JSON object on stdout instead of text."""

    def remember(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        ctx.meta["lumberjack.json"] = value
        return value

    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        callback=remember,
        expose_value=True,
        is_eager=True,
        help="Print one JSON object on stdout instead of text.",
    )(func)


def emit(as_json: bool, data: Any, text: str | None = None) -> None:
    """Print `data` as JSON, or `text` (default: a readable rendering of data)."""
    if as_json:
        click.echo(json.dumps(data, indent=None, sort_keys=False, default=str))
    else:
        click.echo(text if text is not None else json.dumps(data, indent=2, default=str))
