"""The ways a job could make the daemons that run it at a site act for it outside its
own container, as facts both sides share: export refuses such a job (ap/job_channels.py),
the pilots' startds never start one (site/job_container.py), and sync forwards only the
edits of a job that EDITABLE_ATTRS allows (ap/home_queue.py). The job's environment is
not among them: no program outside the container reads it (site/job_wrapper.py).

Everything the starter, the shadow and the container launcher do for a job, they do as
the site account, which every export of every local owner shares. The pools turn the
daemon side of each channel off (templates/security.config.tmpl); a job that needs one
behaves differently at the site than at home, so export refuses it with the reason
instead of letting it fail there. docs/security-model.md lists every channel.

Stdlib only: the site uses these facts too.
"""

from __future__ import annotations

import pkgutil
import re
from functools import lru_cache

#: Job attributes that make the starter, the shadow or the container launcher act for the
#: job outside its container (run a command, read or write a path, change the launch),
#: each with what that would be. The one list: export refuses a job that sets one
#: (ap/job_channels.py), a pilot never starts one (site/job_container.py), and sync never
#: forwards an edit of one (ap/home_queue.py). Read from HTCondor 25's starter, shadow
#: and file transfer; docs/security-model.md names the source file of each.
ACTING_ATTRS: dict[str, str] = {
    "WantIOProxy": "the shadow would read and write files and edit job ads for it (Chirp)",
    "WantRemoteIO": "the shadow would read and write files for it (remote I/O)",
    "WantRemoteSyscalls": "the shadow would make its system calls (remote system calls)",
    "WantRemoteUpdates": "the shadow would edit its job ad for it (Chirp updates)",
    "ToolDaemonCmd": "the starter would run that program beside the job (a tool daemon)",
    "ToolDaemonArgs": "the arguments of a tool daemon the starter would run",
    "ToolDaemonArguments": "the arguments of a tool daemon the starter would run",
    "ToolDaemonInput": "the starter would open that file for a tool daemon",
    "ToolDaemonOutput": "the starter would write a tool daemon's output to that file",
    "ToolDaemonError": "the starter would write a tool daemon's errors to that file",
    "PreCmd": "the starter would run that command before the job (a pre-command)",
    "PreArgs": "the arguments of a pre-command the starter would run",
    "PreArguments": "the arguments of a pre-command the starter would run",
    "PreEnv": "the environment of a pre-command the starter would run",
    "PreEnvironment": "the environment of a pre-command the starter would run",
    "PostCmd": "the starter would run that command after the job (a post-command)",
    "PostArgs": "the arguments of a post-command the starter would run",
    "PostArguments": "the arguments of a post-command the starter would run",
    "PostEnv": "the environment of a post-command the starter would run",
    "PostEnvironment": "the environment of a post-command the starter would run",
    "StarterUserLog": "the starter would write a user log at that path",
    "JobStarterLog": "the shadow would write the starter's log at that path",
    "JobStarterDebug": "the starter would keep a second log of its own in the sandbox, "
    "where the job can put a link in its place",
    "CheckpointDestination": "the starter and the shadow would send checkpoints there",
    "ManifestDir": "the starter would write the job's manifest into that directory",
    "ManifestDesired": "the starter would write the job's manifest after it ends, into a "
    "directory the job can replace with a link",
    "OutputDestination": "the starter would send the job's outputs to that URL",
    "TransferPlugins": "the starter would run the job's own transfer plugins",
    "TransferInputRemaps": "the starter would place input files where it says",
    "PublicInputFiles": "the shadow would publish those files over HTTP",
    "CommonInputFiles": "the shadow would read those paths and the starter keep them for "
    "other jobs (common files)",
    "CommonInputCatalogs": "the shadow would read the paths its catalogs name and the "
    "starter keep them for other jobs (common files, container_is_common)",
    "MountUnderScratch": "the container launcher would take arguments from it (-S)",
}  # fmt: skip
#: Members that are switches: only `true` asks for the channel (condor_submit writes some
#: of them `false` into every job). Any other member asks as soon as it has a value.
SWITCH_ATTRS = frozenset({
    "WantIOProxy", "WantRemoteIO", "WantRemoteSyscalls", "WantRemoteUpdates",
    "ManifestDesired",
})  # fmt: skip
#: The same names as ClassAd sees them (attribute names are case-insensitive).
_ACTING_LOWER = {name.lower(): name for name in ACTING_ATTRS}

#: What a condor_qedit at home may change in the job's copy at the site (sync forwards
#: it; any other edit holds the job at home, with the reason): how the site's schedd
#: orders, matches and polices the job, and the arguments only the job itself reads. An
#: allow-list: any other attribute HTCondor knows (one a newer HTCondor acts on too)
#: stays as export left it; a name of the user's own goes (see editable).
EDITABLE_ATTRS = frozenset({
    "JobPrio", "PreJobPrio1", "PreJobPrio2", "PostJobPrio1", "PostJobPrio2",
    "JobBatchName", "Requirements", "Rank", "ConcurrencyLimits",
    "RequestCpus", "RequestMemory", "RequestDisk", "RequestGPUs",
    "PeriodicHold", "PeriodicHoldReason", "PeriodicHoldSubCode", "PeriodicRelease",
    "PeriodicRemove", "PeriodicVacate", "OnExitHold", "OnExitHoldReason",
    "OnExitHoldSubCode", "OnExitRemove", "MaxJobRetirementTime", "JobMaxVacateTime",
    "AllowedJobDuration", "AllowedExecuteDuration", "Args", "Arguments",
})  # fmt: skip
_EDITABLE_LOWER = {name.lower() for name in EDITABLE_ATTRS}


def acting_attr(name: str) -> str | None:
    """The ACTING_ATTRS spelling of `name` in any case, or None."""
    return _ACTING_LOWER.get(name.lower())


def asks_for(name: str, value: object) -> bool:
    """Whether an ACTING_ATTRS member with this value (None: absent) asks the daemons to
    act: a switch unless it is false, any other member unless it is empty."""
    if name in SWITCH_ATTRS:
        return value not in (None, False)
    return value not in (None, "")


@lru_cache(maxsize=1)
def _htcondor_names() -> frozenset[str]:
    """The attribute names HTCondor's own code knows (htcondor_attributes.txt), lower case."""
    data = pkgutil.get_data("lumberjack.core", "htcondor_attributes.txt") or b""
    lines = data.decode().splitlines()
    return frozenset(line.strip().lower() for line in lines if line and not line.startswith("#"))


def editable(name: str) -> bool:
    """Whether sync may forward a condor_qedit of this attribute to the site: one of
    EDITABLE_ATTRS, or a name of the user's own that no HTCondor daemon knows (a plain
    pool takes `condor_qedit 12.0 MyTag '"x"'`, and so does the site)."""
    lower = name.lower()
    if lower in _EDITABLE_LOWER:
        return True
    return lower not in _ACTING_LOWER and lower not in _htcondor_names()


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
