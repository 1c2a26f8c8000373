"""The ways a job could make the daemons that run it at a site act for it outside its
own container, as facts both sides share: export refuses such a job (ap/job_channels.py)
and the pilots' startds never start one (site/job_container.py).

Everything the starter, the shadow and the container launcher do for a job, they do as
the site account, which every export of every local owner shares. The pools turn the
daemon side of each channel off (templates/security.config.tmpl); a job that needs one
behaves differently at the site than at home, so export refuses it with the reason
instead of letting it fail there. docs/security-model.md lists every channel.

Stdlib only: the site uses these facts too.
"""

from __future__ import annotations

import re

#: Job attributes that ask the starter for Chirp, the I/O proxy or remote system calls:
#: file reads and writes done by the shadow as the site account, and edits of job ads.
REMOTE_IO_ATTRS = ("WantIOProxy", "WantRemoteIO", "WantRemoteSyscalls")

#: Job attributes naming a command, a place or a helper that the daemons would run or
#: write outside the job's container, none of which the bundle can carry:
#: pre and post commands, output and checkpoint destinations, the manifest's directory.
OUTSIDE_ATTRS = {
    "PreCmd": "a pre-command (+PreCmd)",
    "PostCmd": "a post-command (+PostCmd)",
    "CheckpointDestination": "checkpoint_destination",
    "ManifestDir": "manifest_dir",
}

#: Environment variables read by the programs that start a job's container before the
#: container exists (the container runtime, its FUSE helpers, the dynamic loader and C
#: library under them): the C library's own list of variables it drops for a setuid
#: program (they load code or read files the caller chooses), and the container
#: runtime's variables, which would steer the runtime itself.
LAUNCHER_ENV = re.compile(
    r"LD_\w*|MALLOC_\w*|GCONV_PATH|GETCONF_DIR|GLIBC_TUNABLES|HOSTALIASES|LOCALDOMAIN"
    r"|LOCPATH|NIS_PATH|NLSPATH|RESOLV_HOST_CONF|RES_OPTIONS|TMPDIR|TZDIR"
    r"|\w*APPTAINER\w*|\w*SINGULARITY\w*",
    re.IGNORECASE,
)
#: The same names as a ClassAd regexp over a job's Environment (V2: `A=1 B='x y'`) or Env
#: (V1: `A=1;B=2`) text, for the START guard: a name at the start, after a blank, a
#: quote or a semicolon, followed by `=`. Coarser than the parser export uses (a value
#: that holds ` LD_X=` text also matches), which errs on the side of not starting a job.
LAUNCHER_ENV_CLASSAD = "(^|[ ;'\"])(" + LAUNCHER_ENV.pattern + ")="

#: Variables the job's container cannot pass on as HTCondor would: Apptainer sets HOME
#: itself (and HTCondor's starter drops it for container jobs), skips UID, GID and EUID
#: and appends to PROMPT_COMMAND; a name that is not a shell identifier (`A.B`,
#: `BASH_FUNC_f%%`, which HTCondor passes at home) stops its environment script and
#: loses every variable after it.
UNCARRIED_ENV = ("HOME", "UID", "GID", "EUID", "PROMPT_COMMAND")
SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: The container runtime looks for its helper programs (squashfuse, fuse-overlayfs) in
#: the PATH it is given, outside the job's container: a relative entry would find one
#: that the job shipped in its sandbox.
SEARCH_PATH_VAR = "PATH"


def launcher_variable(name: str) -> bool:
    """Whether the programs that start a job's container read this variable."""
    return LAUNCHER_ENV.fullmatch(name) is not None


def uncarried_variable(name: str) -> bool:
    """Whether the job's container would drop or change this variable."""
    return name in UNCARRIED_ENV or SHELL_NAME.fullmatch(name) is None


def unsafe_search_path(value: str) -> bool:
    """Whether a PATH value has an entry the runtime would resolve against the job's
    own directory (empty, `.`, or any relative entry)."""
    return any(not entry.startswith("/") for entry in value.split(":"))


def is_url(entry: str) -> bool:
    """A file-list entry the starter would hand to a URL transfer plugin."""
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", entry) is not None
