"""`condor_lumberjack manpage`: the man page, generated from the command line itself
(every command, its options and the exit codes), so it cannot fall behind `--help`.
One page, roff, on stdout: `condor_lumberjack manpage > condor_lumberjack.1`."""

from __future__ import annotations

import inspect

import click

from lumberjack import __version__
from lumberjack.cli import cli
from lumberjack.cli.common import emit, json_option
from lumberjack.errors import EXIT_CODES

PROG = "condor_lumberjack"


def _escape(text: str) -> str:
    """Text as roff prints it: backslashes and dashes kept, no line read as a request."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line[:1] in (".", "'") else line for line in text.split("\n"))


def _paragraphs(help_text: str) -> list[str]:
    """click's help as roff: a paragraph after "\\b" keeps its lines (examples), the
    others are filled."""
    out = []
    for paragraph in inspect.cleandoc(help_text).split("\n\n"):
        if paragraph.startswith("\b"):
            out += [".PP", ".nf", _escape(paragraph.lstrip("\b").strip("\n")), ".fi"]
        else:
            out += [".PP", _escape(" ".join(paragraph.split()))]
    return out


def _command(path: list[str], command: click.Command, parent: click.Context) -> list[str]:
    ctx = click.Context(command, info_name=path[-1], parent=parent)
    if isinstance(command, click.Group):
        lines: list[str] = []
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                lines += _command([*path, name], sub, ctx)
        return lines
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines = [f'.SS "{_escape(" ".join(path))} {_escape(usage)}"']
    lines += _paragraphs(command.help or command.short_help or "")
    help_option = command.get_help_option(ctx)  # said once, in DESCRIPTION
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
        if record is None or param is help_option:
            continue
        names, text = record
        lines += [".TP", f"\\fB{_escape(names)}\\fR", _escape(" ".join(text.split()))]
    return lines


def render() -> str:
    """The whole page."""
    root = click.Context(cli, info_name=PROG)
    summary = inspect.cleandoc(cli.help or "").split("\n\n")[0]
    lines = [
        f'.TH CONDOR_LUMBERJACK 1 "" "{PROG} {__version__}" "User Commands"',
        ".SH NAME",
        f"{PROG} \\- {_escape(summary)}",
        ".SH SYNOPSIS",
        f"\\fB{PROG}\\fR \\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIARGUMENTS\\fR]",
        ".SH DESCRIPTION",
        *_paragraphs(cli.help or "")[2:],  # the summary is the NAME line
        ".PP",
        "Every command takes \\fB\\-\\-help\\fR; \\fB\\-\\-json\\fR prints one JSON object.",
        ".SH COMMANDS",
    ]
    for name in cli.list_commands(root):
        command = cli.get_command(root, name)
        if command is not None and not command.hidden:
            lines += _command([PROG, name], command, root)
    lines.append('.SH "EXIT STATUS"')
    for code, meaning in EXIT_CODES.items():
        lines += [".TP", f"\\fB{code}\\fR", _escape(meaning)]
    lines += [
        '.SH "SEE ALSO"',
        "\\fBcondor_q\\fR(1), \\fBcondor_submit\\fR(1), \\fBssh\\fR(1), \\fBcrontab\\fR(5)",
    ]
    return "\n".join(lines) + "\n"


@cli.command("manpage")
@json_option
def manpage_command(as_json: bool) -> None:
    """Print the man page (roff), generated from this command line.

    \b
    Examples:
      condor_lumberjack manpage > condor_lumberjack.1 && man ./condor_lumberjack.1
      condor_lumberjack manpage | sudo tee /usr/local/share/man/man1/condor_lumberjack.1
    """
    page = render()
    if as_json:
        emit(True, {"ok": True, "format": "roff", "page": page})
    else:
        click.echo(page, nl=False)
