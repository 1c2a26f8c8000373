"""What every command shares: --json output, one-line errors, exit codes, the
prototype's spellings, and counted words."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, TypeVar

import click

from lumberjack.errors import LumberjackError

F = TypeVar("F", bound=Callable[..., Any])


#: The prototype's command line, `condor_lumberjack --export -jobconstraint EXPR -out DIR
#: -remotespool PATH` and `condor_lumberjack --import -in DIR`: its first word names the
#: command (its other flags are the commands' own aliases).
PROTOTYPE_COMMANDS = {"--export": "export", "--import": "import"}


class LumberjackGroup(click.Group):
    """A click group that turns LumberjackError into `error: ...` and its exit code, and
    that takes the prototype's `--export`/`--import` for the commands."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] in PROTOTYPE_COMMANDS:
            args = [PROTOTYPE_COMMANDS[args[0]], *args[1:]]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LumberjackError as exc:
            # An error may carry details (a list, one line each: e.g. unmatched clusters).
            details = getattr(exc, "details", {})
            if ctx.meta.get("lumberjack.json"):
                click.echo(json.dumps({"ok": False, "error": str(exc), **details}))
            else:
                for line in str(exc).splitlines() or [""]:
                    click.echo(f"error: {line}", err=True)
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


def plural(count: int, word: str, words: str | None = None) -> str:
    """'1 cluster', '2 clusters' (`words` for a plural that is not word + s)."""
    return f"{count} {word if count == 1 else (words or word + 's')}"
