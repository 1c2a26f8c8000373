"""Reading a user's inputs and writing a user's bundle with that user's identity.

`export` often runs as root for a job's owner. Every read of the owner's input files and
every file and directory of the bundle happen in a child process that runs as the owner
(uid, gid, groups; umask 077): a symlink the user placed reaches only what the user could
read anyway (the rule HTCondor's own file transfer follows), and nothing the user can
swap under the bundle makes root write or read somewhere else. When lumberjack runs as
the owner (or the owner is root) the same functions run in this process.

The child is `python -I -m lumberjack.ap.as_user` (a fresh interpreter, so no thread of
this process is copied into it): one JSON request on stdin; on stdout one JSON line per
progress report and a last line with the result or the error.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from lumberjack.errors import BadInput, LumberjackError

ProgressCallback = Callable[[int], None]


def _calls() -> dict[str, Callable[..., Any]]:
    # Imported here: export imports this module.
    from lumberjack.ap import export

    return {"check_inputs": export.check_inputs_json, "write_bundle": export.write_bundle_json}


def identity(owner: str) -> tuple[int, int] | None:
    """(uid, gid) to act as for `owner`; None: this process already may (not root, or
    the owner is root). BadInput when root acts for an owner with no local account."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(owner)
    except KeyError:
        raise BadInput(
            f"job owner {owner!r} has no account on this machine; cannot read its inputs as it"
        ) from None
    if entry.pw_uid == 0:
        return None
    return entry.pw_uid, entry.pw_gid


def call_as(
    owner: str, name: str, args: dict[str, Any], progress: ProgressCallback | None = None
) -> Any:
    """`name`(**args) with the identity of `owner`; its JSON result."""
    ids = identity(owner)
    if ids is None:
        return _calls()[name](progress=progress, **args)
    uid, gid = ids
    child = subprocess.Popen(
        [sys.executable, "-I", "-m", "lumberjack.ap.as_user"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
        user=uid,
        group=gid,
        extra_groups=os.getgrouplist(owner, gid),
        umask=0o077,
    )
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    child.stdin.write(json.dumps({"call": name, "args": args}))
    child.stdin.close()
    answer: dict[str, Any] = {}
    for line in child.stdout:
        answer = json.loads(line)
        if "progress" in answer and progress:
            progress(answer["progress"])
    stderr = child.stderr.read()
    child.wait()
    if "error" in answer:
        kind = BadInput if answer.get("kind") == "BadInput" else LumberjackError
        raise kind(answer["error"])
    if "result" not in answer:
        detail = (stderr.strip().splitlines() or [f"exit code {child.returncode}"])[-1]
        raise LumberjackError(f"reading the inputs as {owner} failed: {detail}")
    return answer["result"]


def main() -> int:
    request = json.loads(sys.stdin.read())

    def report(size: int) -> None:
        print(json.dumps({"progress": size}), flush=True)

    try:
        result = _calls()[request["call"]](progress=report, **request["args"])
    except (LumberjackError, OSError, ValueError) as exc:
        kind = "BadInput" if isinstance(exc, BadInput) else type(exc).__name__
        print(json.dumps({"error": str(exc), "kind": kind}), flush=True)
        return 1
    print(json.dumps({"result": result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
