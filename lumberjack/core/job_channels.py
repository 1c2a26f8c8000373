"""The ways a job could make the daemons that run it at a site act for it outside its
own container, as facts both sides share: export refuses such a job (ap/job_channels.py)
and the pilots' startds never start one (site/job_container.py). The job's environment
is not among them: no program outside the container reads it (site/job_wrapper.py).

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

#: Variables a job's own image cannot be given as HTCondor gives them at home: with no
#: python of the site image inside it, the job's environment reaches it through
#: Apptainer, which sets HOME itself, skips UID, GID and EUID, appends to PROMPT_COMMAND,
#: and stops its environment script at a name that is not a shell identifier (`A.B`,
#: `BASH_FUNC_f%%`). Jobs in the site image get every variable byte for byte
#: (site/job_wrapper.py).
UNCARRIED_ENV = ("HOME", "UID", "GID", "EUID", "PROMPT_COMMAND")
SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def uncarried_variable(name: str) -> bool:
    """Whether Apptainer would drop or change this variable of a job in its own image."""
    return name in UNCARRIED_ENV or SHELL_NAME.fullmatch(name) is None


def is_url(entry: str) -> bool:
    """A file-list entry the starter would hand to a URL transfer plugin."""
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", entry) is not None
