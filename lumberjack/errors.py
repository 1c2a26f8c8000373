"""The errors lumberjack raises on purpose, each with the exit code the CLI returns.

Every message is one line a person can act on; the CLI prints it as `error: MESSAGE`.
"""

from __future__ import annotations

# signal's C half: the Python half's wrappers run bytecode a Ctrl-C can interrupt (and no
# typing here either: this module loads before the entry point's Ctrl-C handler).
import _signal
import os


class LumberjackError(Exception):
    """Something went wrong that is not a bug; exit code 1."""

    exit_code = 1


class BadInput(LumberjackError):
    """The user's input (ids, constraint, site, request, file) is wrong; nothing changed."""

    exit_code = 2


class RemoteError(LumberjackError):
    """The site (SSH, batch system, remote pool) failed or answered something unexpected."""

    exit_code = 3


class SetupError(BadInput):
    """Something set up once is wrong: the site's host key unknown or changed, the login
    key missing or refused, a profile file that does not load, an allocation the batch
    system does not know, the site image missing. Retrying cannot help; a person must
    fix it. Its own exit code, so cron (and whoever reads its mail) tells it from a site
    that failed for now (RemoteError, retried next round)."""

    exit_code = 7


class Busy(LumberjackError):
    """Another lumberjack process holds the lock for this export; try again later."""

    exit_code = 4


class LoginNeeded(LumberjackError):
    """The site asks for a one-time code and no login (OpenSSH master) is live; nothing
    was tried at the site. A person runs `condor_lumberjack login SITE` (or, where the
    site allows no shared login, `sync --watch`)."""

    exit_code = 5


class StateError(LumberjackError):
    """The state directory or the ledger in it cannot be used (missing and not creatable,
    not a directory, unwritable, corrupt, read-only, disk full); nothing changed."""

    exit_code = 6


#: A bug: an exception no code path expected. The CLI prints one line, not a traceback
#: (LUMBERJACK_TRACEBACK=1 shows it).
INTERNAL_ERROR_EXIT = 70

#: A command stopped by Ctrl-C (as shells report SIGINT).
INTERRUPTED_EXIT = 130


def exit_interrupted(_signum: int = _signal.SIGINT, _frame: object = None) -> None:
    """The SIGINT handler from the entry point's first line until a command runs: while
    modules load nothing needs cleaning up, so one line and exit 130, never the traceback
    a KeyboardInterrupt in an import would print. A running command gets the usual
    KeyboardInterrupt back (its `with` blocks release locks); see cli.common."""
    os.write(2, b"error: interrupted\n")
    os._exit(INTERRUPTED_EXIT)


def exit_on_ctrl_c() -> None:
    """Install exit_interrupted for SIGINT (the entry point's first statement), unless
    SIGINT is not Python's default (ignored, as for a shell script's `cmd &`)."""
    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, exit_interrupted)


#: Every exit code of the CLI and what it means (docs/exit-codes.md says more; `--help`
#: lists these; a test checks that the two agree).
EXIT_CODES = {
    0: "done",
    LumberjackError.exit_code: "failed; the message says what happened",
    BadInput.exit_code: "bad input or usage; nothing changed",
    RemoteError.exit_code: "the site failed (SSH, batch system, remote pool); retry later",
    Busy.exit_code: "busy: another process holds the export or the ledger; try again",
    LoginNeeded.exit_code: "the site needs a login: condor_lumberjack login SITE",
    StateError.exit_code: "the state directory or ledger cannot be used; nothing changed",
    SetupError.exit_code: "a setup mistake (host key, profile, allocation, site image); "
    "retrying will not help",
    INTERNAL_ERROR_EXIT: "internal error (a bug; please report it)",
    INTERRUPTED_EXIT: "interrupted (Ctrl-C)",
}
