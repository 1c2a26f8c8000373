#!/usr/bin/python3
"""The starter's job wrapper at the site: what runs outside the job's container, and how
the job's environment reaches the job and nothing else.

HTCondor's starter runs USER_JOB_WRAPPER (see job_container.py) outside the job's
container, around the container launcher, with the job's environment. That environment
is the job's to choose (LD_PRELOAD, PYTHONPATH, PATH, APPTAINER_BIND...), and every
dynamically linked program started with it would obey it as the site account. So the
boundary is built, not listed: the starter's wrapper is a BusyBox script (static; see
templates/job_wrapper.sh.tmpl) that saves the environment as data and starts this file
with `python3 -I -S` and an environment of lumberjack's; the container launcher gets a
fixed environment too; and the job's environment is applied inside the job's container
by a small parent (INNER, the site image's python, isolated as well), byte for byte as
the starter built it. Nothing outside the container reads a variable of the job's.

The same parent reports a job killed by a signal as killed by it: Apptainer ends with
128+N when the job in its container dies by signal N, the same as a job that exits
128+N, so the starter would report `ExitCode = 143` where HTCondor at home reports
`ExitBySignal = true, ExitSignal = 15`. The parent writes the signal that killed the job
to a descriptor the wrapper gave it; the wrapper then ends itself by that signal, so the
starter sees what it would have seen at home. Signals the starter sends (a removal, a
vacate) go on to the launcher, and from the inner parent to the job.

A job with an image of its own (which may have no python) gets its environment from
Apptainer instead: the starter's APPTAINERENV_ copies of it, which Apptainer sets only
inside the container, are the one part of it the launcher is given.

Stdlib only, and a script of its own: the pilots write it beside their config.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
from typing import Callable

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
#: The search path of every program this wrapper starts outside the job's container.
LAUNCHER_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
#: The prefixes under which HTCondor's starter copies the job's environment for Apptainer
#: (the copy holds the values as the job sees them inside: its scratch is /srv there).
CONTAINER_ENV_PREFIXES = (b"APPTAINERENV_", b"SINGULARITYENV_")
#: What that parent runs: the job as its child with the environment read from descriptor
#: argv[2] and the signals of mask argv[3] ignored (as the starter ignores them for a
#: job: SIGPIPE), every signal it can catch passed on, the signal that killed the job
#: written to descriptor argv[1], and its exit code as is.
INNER = """\
import os, signal, subprocess, sys
fd, env_fd, ignored, job = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3], 16), sys.argv[4:]
with os.fdopen(env_fd, "rb") as saved:
    pairs = [entry.partition(b"=") for entry in saved.read().split(b"\\0") if entry]
env = {name: value for name, _, value in pairs}
# HTCondor's starter sets HOME itself (the owner's home; Apptainer's --home in a container)
env.setdefault(b"HOME", os.environb.get(b"HOME", b"/"))
def dispositions():
    for sig in range(1, 32):
        if ignored >> (sig - 1) & 1 and sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_IGN)
child = subprocess.Popen(job, env=env, preexec_fn=dispositions)
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
#: The signals the wrapper passes on to the launcher (the starter's removal, vacate,
#: suspend and the job's own checkpoint signal).
FORWARDED = (
    signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
    signal.SIGUSR2, signal.SIGCONT, signal.SIGTSTP,
)  # fmt: skip

Environ = list[tuple[bytes, bytes]]


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


def with_inner_parent(
    argv: list[str], fd: int, env_fd: int, ignored: str = "0"
) -> list[str] | None:
    """The launcher command with INNER between the image and the job's command."""
    at = image_index(argv)
    if at is None:
        return None
    inner = [INNER_PYTHON, "-I", "-S", "-c", INNER, str(fd), str(env_fd), ignored]
    return [*argv[: at + 1], *inner, *argv[at + 1 :]]


def read_saved(data: bytes) -> Environ:
    """The environment the static wrapper saved (`env -0`: NAME=VALUE, each ended by NUL),
    in its order."""
    pairs = [entry.partition(b"=") for entry in data.split(b"\0") if entry]
    return [(name, value) for name, _, value in pairs]


def job_environment(saved: Environ) -> Environ:
    """The job's environment as the job sees it inside its container: each variable the
    starter also copied under a container prefix takes that copy's value (the starter
    points them at the container's paths), and the copies themselves go."""
    names = {name for name, _ in saved}
    inside: dict[bytes, bytes] = {}
    for name, value in saved:
        for prefix in CONTAINER_ENV_PREFIXES:
            if name.startswith(prefix) and name[len(prefix) :] in names:
                inside[name[len(prefix) :]] = value
                break
    copies = {prefix + name for name in inside for prefix in CONTAINER_ENV_PREFIXES}
    return [(n, inside.get(n, v)) for n, v in saved if n not in copies]


def launcher_environment(saved: Environ, with_copies: bool) -> dict[bytes, bytes]:
    """The environment of the container launcher: lumberjack's search path and, for a job
    in its own image, the starter's container copies of the job's environment (Apptainer
    sets them inside the container only); never a variable of the job's own name."""
    env = {b"PATH": LAUNCHER_PATH.encode()}
    if with_copies:
        env.update((n, v) for n, v in saved if n.startswith(CONTAINER_ENV_PREFIXES))
    return env


def die_like(sig: int) -> None:
    """End this process by `sig`, as the job ended, without a core file of its own."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # neither can be caught or blocked
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)


def script(site_image: str) -> str:
    """This file's text for pilots whose site image is `site_image` (read with pkgutil:
    the agent runs from a zipapp)."""
    import pkgutil

    text = (pkgutil.get_data("lumberjack.site", "job_wrapper.py") or b"").decode()
    return text.replace('\nSITE_IMAGE = ""\n', f"\nSITE_IMAGE = {site_image!r}\n", 1)


def _take_saved(path: str) -> Environ:
    with open(path, "rb") as saved:
        data = saved.read()
    os.unlink(path)
    return read_saved(data)


def ignoring(mask: int) -> Callable[[], None]:
    """What makes a child ignore the signals of `mask` (SigIgn of /proc/PID/status), as
    the starter had the wrapper ignore them: python ignores SIGPIPE for itself, and its
    children get every signal at its default. (INNER has its own copy: it runs in the
    job's container as a program of its own, importing nothing of lumberjack.)"""

    def dispositions() -> None:
        for sig in range(1, 32):
            if mask >> (sig - 1) & 1 and sig not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(sig, signal.SIG_IGN)

    return dispositions


def _run(command: list[str], env: dict[bytes, bytes], fds: tuple[int, ...], mask: int) -> int:
    """Run the launcher, passing on the starter's signals; its exit code."""
    child = subprocess.Popen(command, env=env, pass_fds=fds, preexec_fn=ignoring(mask))

    def forward(sig: int, _frame: object) -> None:
        child.send_signal(sig)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    return child.wait()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or not re.fullmatch(r"[0-9a-fA-F]{1,16}", argv[2]):
        print("job_wrapper: usage: job_wrapper.py SAVED_ENV SIGIGN COMMAND...", file=sys.stderr)
        return 1
    saved, ignored, launcher = _take_saved(argv[1]), argv[2], argv[3:]
    with tempfile.TemporaryFile() as record, tempfile.TemporaryFile() as env_file:
        env_file.write(b"".join(n + b"=" + v + b"\0" for n, v in job_environment(saved)))
        env_file.seek(0)
        command = with_inner_parent(launcher, record.fileno(), env_file.fileno(), ignored)
        env = launcher_environment(saved, with_copies=command is None)
        fds = (record.fileno(), env_file.fileno())
        code = _run(command or launcher, env, fds, int(ignored, 16))
        record.seek(0)
        killed_by = record.read(8).strip()
    if killed_by.isdigit() and code == 128 + int(killed_by):
        return end_like(int(killed_by))
    if code < 0:  # the launcher itself killed (a hard kill of the whole job)
        return end_like(-code)
    return code


def end_like(sig: int) -> int:
    """End as a job killed by `sig` ends. But HTCondor's DaemonCore takes a child ended by
    SIGTRAP for a debugger's stop and never reaps it (daemon_core.cpp, TDP): a plain
    pool's job killed so stays running for ever. That one ends with the shell's 128+5."""
    if sig == signal.SIGTRAP:
        return 128 + sig
    die_like(sig)
    return 128 + sig  # not reached: the signal ends this process


if __name__ == "__main__":
    sys.exit(main(sys.argv))
