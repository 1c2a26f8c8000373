#!/usr/bin/python3
"""The starter's job wrapper at the site: a job killed by a signal in its container is
reported killed by that signal, as a plain HTCondor pool reports it.

Apptainer ends with 128+N when the job in its container dies by signal N, the same as a
job that exits 128+N, so the starter would report `ExitCode = 143` where HTCondor at
home reports `ExitBySignal = true, ExitSignal = 15`. The startd names this file as
USER_JOB_WRAPPER (see job_container.py), which HTCondor runs outside the job's
container around the container launcher. It starts the job, inside the container,
under a small parent (INNER, the site image's python) that waits for it and writes the
signal that killed it to a file the wrapper gave it by descriptor. The wrapper then
ends itself by that signal, so the starter sees what it would have seen at home; an
ordinary exit, whatever its code, passes unchanged. Signals the starter sends (a
removal, a vacate) go on to the launcher, and from the inner parent to the job.

A launcher command it does not recognise (no `exec`, no image it can find) runs
unchanged: the wrapper only adds, never alters, the job's command.

Stdlib only, and a script of its own: the pilots write it beside their config.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile

#: Launcher options that take a value as the next word (HTCondor's, and Apptainer's
#: spellings of them); any other option is a flag or carries its value after `=`.
VALUE_OPTIONS = frozenset(
    ("-B", "--bind", "-S", "--scratch", "-W", "--workdir", "--pwd", "--home", "-H",
     "--env", "--env-file", "--security", "--hostname", "--mount", "--overlay", "-o",
     "--network", "--network-args", "--app", "--dns", "--fusemount")
)  # fmt: skip
#: The job's parent inside the container: the site image's python (Debian's condor package
#: depends on python3, so every build of the image has it). Only jobs in the site
#: image get it (a job's own image may have no python); the pilots write this file with
#: the site image's path here.
INNER_PYTHON = "/usr/bin/python3"
SITE_IMAGE = ""
#: What that parent runs: the job as its child, every signal it can catch passed on,
#: the signal that killed the job written to descriptor argv[1], and its exit code as is.
INNER = """\
import os, signal, subprocess, sys
fd, job = int(sys.argv[1]), sys.argv[2:]
child = subprocess.Popen(job)
def forward(sig, _frame):
    child.send_signal(sig)
for sig in set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD}:
    try:
        signal.signal(sig, forward)
    except (OSError, ValueError):
        pass
code = child.wait()
if code < 0:
    os.write(fd, str(-code).encode())
    sys.exit(128 - code)
sys.exit(code)
"""


def image_index(argv: list[str]) -> int | None:
    """Where the image is in `apptainer [global flags] exec [options] IMAGE COMMAND...`:
    the first word after `exec` that is no option or an option's value, when it is the
    site image; None otherwise."""
    try:
        i = argv.index("exec", 1) + 1
    except ValueError:
        return None
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in VALUE_OPTIONS else 1
    if i + 1 < len(argv) and SITE_IMAGE and argv[i] == SITE_IMAGE:
        return i
    return None


def with_inner_parent(argv: list[str], fd: int) -> list[str] | None:
    """The launcher command with INNER between the image and the job's command."""
    at = image_index(argv)
    if at is None:
        return None
    return [*argv[: at + 1], INNER_PYTHON, "-c", INNER, str(fd), *argv[at + 1 :]]


def die_like(sig: int) -> None:
    """End this process by `sig`, as the job ended, without a core file of its own."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)


def script(site_image: str) -> str:
    """This file's text for pilots whose site image is `site_image` (read with pkgutil:
    the agent runs from a zipapp)."""
    import pkgutil

    text = (pkgutil.get_data("lumberjack.site", "job_wrapper.py") or b"").decode()
    return text.replace('\nSITE_IMAGE = ""\n', f"\nSITE_IMAGE = {site_image!r}\n", 1)


def main(argv: list[str]) -> int:
    launcher = argv[1:]
    if not launcher:
        print("job_wrapper: no command to run", file=sys.stderr)
        return 1
    with tempfile.TemporaryFile() as record:
        command = with_inner_parent(launcher, record.fileno())
        if command is None:
            os.execv(launcher[0], launcher)
        child = subprocess.Popen(command, pass_fds=(record.fileno(),))

        def forward(sig: int, _frame: object) -> None:
            child.send_signal(sig)

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                    signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT, signal.SIGTSTP):  # fmt: skip
            signal.signal(sig, forward)
        code = child.wait()
        record.seek(0)
        killed_by = record.read(8).strip()
    if killed_by.isdigit() and code == 128 + int(killed_by):
        die_like(int(killed_by))
    if code < 0:  # the launcher itself killed (a hard kill of the whole job)
        die_like(-code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
