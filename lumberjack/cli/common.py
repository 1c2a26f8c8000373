"""What every command shares: --json output, one-line errors and their exit codes (one
mapping, `failure`; listed in docs/exit-codes.md), the prototype's spellings, and counted
words."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Callable, NoReturn, TypeVar

import click

from lumberjack.core.message_text import one_line
from lumberjack.core.records import to_json
from lumberjack.errors import (
    EXIT_CODES,
    INTERNAL_ERROR_EXIT,
    INTERRUPTED_EXIT,
    LumberjackError,
    StateError,
    exit_interrupted,
)

F = TypeVar("F", bound=Callable[..., Any])


#: The prototype's command line, `condor_lumberjack --export -jobconstraint EXPR -out DIR
#: -remotespool PATH` and `condor_lumberjack --import -in DIR`: its first word names the
#: command (its other flags are the commands' own aliases).
PROTOTYPE_COMMANDS = {"--export": "export", "--import": "import"}


class OneDashSpellings(click.Command):
    """Every long option also with one dash, as HTCondor's tools spell them (`-json`,
    `-dry-run`, `-site`), and an unknown option named as typed: click would read
    `-json` as -j, -s, ... and name `-j`. A word that is an option of its own (`-c`,
    `-constraint`, `-out`) stays what it is; `-xyz` becomes `--xyz` only where that is an
    option of the command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = self._two_dashes(ctx, args)
        try:
            return super().parse_args(ctx, list(args))  # (click uses up the list it gets)
        except click.NoSuchOption as exc:
            typed = [word for word in args if _is_one_dash(word)]
            word = next((w for w in typed if w.startswith(exc.option_name)), None)
            if word is None or word == exc.option_name:
                raise
            raise click.NoSuchOption(word.partition("=")[0], ctx=ctx) from None

    def _two_dashes(self, ctx: click.Context, args: list[str]) -> list[str]:
        names = {
            name for param in self.get_params(ctx) for name in param.opts + param.secondary_opts
        }
        words = []
        for i, word in enumerate(args):
            if word == "--" or (isinstance(self, click.Group) and not word.startswith("-")):
                return words + args[i:]  # a group's own options end at its command
            name = word.partition("=")[0]
            if _is_one_dash(name) and name not in names and f"-{name}" in names:
                word = f"-{word}"
            words.append(word)
        return words


def _is_one_dash(word: str) -> bool:
    return len(word) > 2 and word[0] == "-" and word[1] != "-" and not word[1].isdigit()


class LumberjackGroup(OneDashSpellings, click.Group):
    """A click group that takes the prototype's `--export`/`--import` for the commands,
    and whose `main` ends every failure in one line and its exit code (`failure`). Its
    commands and groups take one-dash spellings too (OneDashSpellings)."""

    command_class = OneDashSpellings

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] in PROTOTYPE_COMMANDS:
            args = [PROTOTYPE_COMMANDS[args[0]], *args[1:]]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:  # click would print an empty line before ours
            raise click.Abort from exc

    def main(self, args: Sequence[str] | None = None, *a: Any, **extra: Any) -> NoReturn:
        argv = list(sys.argv[1:] if args is None else args)
        extra.pop("standalone_mode", None)
        try:
            with _interrupt_as_exception():
                code = super().main(argv, *a, standalone_mode=False, **extra)
        except SystemExit:
            raise
        except BaseException as exc:  # noqa: BLE001  (the one place every failure ends)
            if os.environ.get("LUMBERJACK_TRACEBACK") and not isinstance(exc, _EXPECTED):
                raise
            code = report_failure(exc, wants_json(argv))
        sys.exit(code if isinstance(code, int) else 0)


@contextlib.contextmanager
def _interrupt_as_exception() -> Iterator[None]:
    """While a command runs, Ctrl-C is a KeyboardInterrupt again, so its `with` blocks
    (locks, temporary files) clean up; before and after, the entry point's handler
    (errors.exit_interrupted) ends the process in one line. Left alone when the entry
    point did not install that handler (a test's CliRunner)."""
    if signal.getsignal(signal.SIGINT) is not exit_interrupted:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, exit_interrupted)


LumberjackGroup.group_class = LumberjackGroup  # (`cli.group()` would make a plain click.Group)

_EXPECTED = (LumberjackError, click.ClickException, click.Abort, KeyboardInterrupt)


def wants_json(argv: Sequence[str]) -> bool:
    """Whether --json (or -json) is among the words (before a `--`), wherever it stands:
    a usage error is then still answered in JSON."""
    words = list(argv)
    return bool({"--json", "-json"} & set(words[: words.index("--")] if "--" in words else words))


def failure(exc: BaseException) -> tuple[int, str]:
    """The exit code and one-line message for a failure (docs/exit-codes.md lists them)."""
    if isinstance(exc, LumberjackError):  # its own lines (one, but for a list of findings)
        return exc.exit_code, str(exc).strip() or type(exc).__name__
    if isinstance(exc, click.ClickException):
        return exc.exit_code, exc.format_message()
    if isinstance(exc, (click.Abort, KeyboardInterrupt)):
        return INTERRUPTED_EXIT, "interrupted"
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        if exc.errno in _DISK_ERRNOS:
            return StateError.exit_code, f"{where}{exc.strerror}; free space or fix the disk"
        return LumberjackError.exit_code, f"{where}{exc.strerror or exc}"
    name = type(exc).__name__
    message = one_line(str(exc), "(no message)")
    return INTERNAL_ERROR_EXIT, (
        f"internal error (a bug; please report it): {name}: {message}; "
        "LUMBERJACK_TRACEBACK=1 shows where"
    )


_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


def report_failure(exc: BaseException, as_json: bool) -> int:
    """Print the failure (JSON on stdout, or text on stderr); its exit code."""
    if isinstance(exc, BrokenPipeError):  # the reader went away (`| head`): nothing to say
        return LumberjackError.exit_code
    code, message = failure(exc)
    if as_json:
        # An error may carry details (e.g. a list of findings) for the JSON answer.
        click.echo(json.dumps({"ok": False, "error": message, **getattr(exc, "details", {})}))
    elif isinstance(exc, click.UsageError):
        exc.show()  # click's usage line, then "Error: ..."
    else:
        for line in message.splitlines():
            click.echo(f"error: {line}", err=True)
    return code


def exit_codes_help() -> str:
    """The exit codes for --help (click keeps the lines of a \\b paragraph as they are)."""
    lines = [f"  {code:>3}  {meaning}" for code, meaning in EXIT_CODES.items()]
    return "\b\nExit codes (docs/exit-codes.md):\n" + "\n".join(lines)


def selection_options(func: F) -> F:
    """The jobs a command takes: -c/--constraint (-constraint, -const as condor_q spells
    it; -jobconstraint), --ids (-ids) and ids as arguments, in the prototype's spellings
    too. Each single-dash word is an option of its own: click matches it whole before it
    would read `-constraint` as -c with the value "onstraint"."""
    for option in reversed((
        click.option(
            "-c", "--constraint", "-constraint", "-const", "-jobconstraint", "constraint",
            metavar="EXPR",
            help="ClassAd constraint selecting the jobs (whole clusters).",
        ),
        click.option(
            "--ids", "-ids", "ids", multiple=True, metavar="ID",
            help="Job ids: CLUSTER or CLUSTER.PROC; repeat or give several.",
        ),
        click.argument("more_ids", nargs=-1, metavar="[ID...]"),
    )):  # fmt: skip
        func = option(func)
    return func


def destination_options(func: F) -> F:
    """--site and --lease: where `export` and `run` send the jobs (names complete)."""
    from lumberjack.cli.completion import complete_lease, complete_site

    func = click.option(
        "--lease", metavar="NAME", shell_complete=complete_lease,
        help="Join lease NAME (see `lease create`): its site, collector and pilots.",
    )(func)  # fmt: skip
    return click.option(
        "--site", shell_complete=complete_site,
        help="Site profile the jobs go to (see `sites list`; or --lease).",
    )(func)  # fmt: skip


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
        click.echo(json.dumps(to_json(data), indent=None, sort_keys=False, default=str))
    else:
        text = text if text is not None else json.dumps(to_json(data), indent=2, default=str)
        click.echo(text)


def text_of(value: Any) -> str:
    """A value of a JSON answer as a person reads it, never a Python repr: a dict as
    "key value, ...", a list comma-separated, True/False as yes/no, None as "-"."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{key.replace('_', ' ')} {text_of(item)}" for key, item in value.items())
    if isinstance(value, (list, tuple, set)):
        return ", ".join(text_of(item) for item in value) or "none"
    return str(value)


def text_table(rows: list[list[str]]) -> str:
    """Rows as aligned columns (the first row the header)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows
    )


def plural(count: int, word: str, words: str | None = None) -> str:
    """'1 cluster', '2 clusters' (`words` for a plural that is not word + s)."""
    return f"{count} {word if count == 1 else (words or word + 's')}"
