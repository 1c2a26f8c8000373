"""Work done in a child process that has become a job's owner: reading the owner's
inputs and writing the bundle at export, the schedd's merge at import.

`export` often runs as root for a job's owner. Every read of the owner's input files and
every file and directory of the bundle happen in a child process that runs as the owner
(uid, gid, groups; umask 077): a symlink the user placed reaches only what the user could
read anyway (the rule HTCondor's own file transfer follows), and nothing the user can
swap under the bundle makes root write or read somewhere else. When lumberjack runs as
the owner (or the owner is root) the same functions run in this process.

The child is forked (the interpreter may live where the owner cannot reach it, e.g. a
root-only virtualenv) and drops to the owner before it does anything else; it reports
through a pipe, one JSON line per progress report and a last line with the result or the
error. The child touches nothing another thread could hold (no SSH, no logging).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from typing import Any

from lumberjack.core import crashpoints
from lumberjack.errors import BadInput, LumberjackError
from lumberjack.host.identity import owner_of

ProgressCallback = Callable[[int], None]


def call_as(
    owner: str,
    call: Callable[..., Any],
    args: dict[str, Any],
    progress: ProgressCallback | None = None,
) -> Any:
    """`call`(**args, progress=...) with the identity of `owner`; its JSON result. `call`
    is imported by the caller, before the fork: the owner may not read the interpreter's
    own files."""
    found = owner_of(owner)
    if found is None:
        return call(progress=progress, **args)
    uid, gid, groups = found.uid, found.gid, list(found.groups)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become the owner, do the work, report, exit
        os.close(read_end)
        _child(write_end, uid, gid, groups, call, args)
    os.close(write_end)
    answer: dict[str, Any] = {}
    try:
        with os.fdopen(read_end) as lines:
            for line in lines:
                answer = json.loads(line)
                if "progress" in answer and progress:
                    progress(answer["progress"])
    finally:
        _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL and crashpoints.armed():
        # A crash point killed the child: the crash it stands for takes the whole export.
        os.kill(os.getpid(), signal.SIGKILL)
    if "error" in answer:
        kind = BadInput if answer.get("kind") == "BadInput" else LumberjackError
        raise kind(answer["error"])
    if "result" not in answer:
        raise LumberjackError(f"reading the inputs as {owner} failed (wait status {status})")
    return answer["result"]


def _child(
    fd: int, uid: int, gid: int, groups: list[int], call: Callable[..., Any], args: dict
) -> None:
    code = 1
    try:
        with os.fdopen(fd, "w") as out:

            def report(size: int) -> None:
                out.write(json.dumps({"progress": size}) + "\n")
                out.flush()

            try:
                os.setgroups(groups)
                os.setgid(gid)
                os.setuid(uid)  # last: after it, no way back to root
                os.umask(0o077)
                os.chdir("/")
                answer = {"result": call(progress=report, **args)}
                code = 0
            except (LumberjackError, OSError, ValueError) as exc:
                kind = "BadInput" if isinstance(exc, BadInput) else type(exc).__name__
                answer = {"error": str(exc), "kind": kind}
            except BaseException as exc:  # reported, never raised into the parent's code
                answer = {"error": f"{type(exc).__name__}: {exc}", "kind": "internal"}
            out.write(json.dumps(answer) + "\n")
    finally:
        os._exit(code)
