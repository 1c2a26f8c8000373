"""Export refuses a job that would make the site's daemons act for it outside its own
container (Chirp, tool daemons and pre/post commands, paths the daemons would write or
read, URL transfers, outputs or checkpoints outside its sandbox): one line naming the
job and the channel. The facts live in
core/job_channels.py; the pools turn each channel off at the site as well, so a job
refused here would fail there.
"""

from __future__ import annotations

import posixpath
from typing import Any, Optional

from lumberjack.ap.file_lists import split_file_list
from lumberjack.core.job_channels import (
    ACTING_ATTRS,
    asks_for,
    is_url,
    uncarried_variable,
)
from lumberjack.core.message_text import shown

#: Input attributes whose entries the starter would fetch by URL at the site.
URL_INPUT_ATTRS = ("TransferInput", "In", "Cmd", "x509userproxy")
#: Output lists whose entries the starter reads in the job's sandbox: names inside it.
SANDBOX_NAME_ATTRS = ("TransferOutput", "TransferCheckpoint")
#: The attributes that give a job an image of its own (else it runs in the site image).
OWN_IMAGE_ATTRS = ("ContainerImage", "SingularityImage")
#: Every attribute this module reads (the schedd query asks for them).
CHANNEL_ATTRS = (
    *ACTING_ATTRS, *URL_INPUT_ATTRS, *SANDBOX_NAME_ATTRS,
    *OWN_IMAGE_ATTRS, "Environment", "Env",
)  # fmt: skip


def environment_names(job: dict[str, Any]) -> dict[str, str]:
    """The job's environment as HTCondor builds it: Environment (V2) wins over Env (V1)."""
    v2 = job.get("Environment")
    if isinstance(v2, str):
        return parse_v2(v2)
    v1 = job.get("Env")
    if isinstance(v1, str):
        return dict(_pair(part) for part in v1.split(";") if part.strip())
    return {}


def parse_v2(text: str) -> dict[str, str]:
    """`A=1 B='x y' C='it''s'` as HTCondor reads it: blanks separate, single quotes group
    and a doubled quote inside them is one quote."""
    words: list[str] = []
    word: list[str] = []
    quoted = in_word = False
    i = 0
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "'" and text[i + 1 : i + 2] == "'":
                word.append("'")
                i += 1
            elif c == "'":
                quoted = False
            else:
                word.append(c)
        elif c == "'":
            quoted = in_word = True
        elif c in " \t\n":
            if in_word:
                words.append("".join(word))
            word, in_word = [], False
        else:
            word.append(c)
            in_word = True
        i += 1
    if in_word:
        words.append("".join(word))
    return dict(_pair(w) for w in words)


def _pair(word: str) -> tuple[str, str]:
    name, _, value = word.strip().partition("=")
    return name, value


def _environment_problem(job: dict[str, Any]) -> Optional[str]:
    """Only a job in an image of its own can be refused for its environment: the site
    image's python applies every variable inside the job's container, but a job image
    gets them through Apptainer (core/job_channels.UNCARRIED_ENV)."""
    if not any(isinstance(job.get(attr), str) for attr in OWN_IMAGE_ATTRS):
        return None
    for name in environment_names(job):
        if uncarried_variable(name):
            return (
                f"its environment sets {shown(name)}, which Apptainer cannot pass into the "
                "job's own image as HTCondor does at home (it sets HOME itself and carries "
                "only shell names); set it in the job's own script, or run the job in the "
                "site image"
            )
    return None


def _list_problem(job: dict[str, Any]) -> Optional[str]:
    for attr in URL_INPUT_ATTRS:
        value = job.get(attr)
        entries = split_file_list(value) if isinstance(value, str) else []
        for entry in entries if attr == "TransferInput" else entries[:1]:
            if is_url(entry):
                return (
                    f"{attr} entry {shown(entry)} is a URL, which the site would fetch as its "
                    "shared account (and compute nodes have no network): give a file to ship"
                )
    for attr in SANDBOX_NAME_ATTRS:
        value = job.get(attr)
        for entry in split_file_list(value) if isinstance(value, str) else []:
            parts = entry.split("/")
            if is_url(entry) or posixpath.isabs(entry) or ".." in parts:
                return (
                    f"{attr} entry {shown(entry)} is not a name inside the job's sandbox: "
                    "the site would read it outside the job's container; name a file the "
                    "job writes (transfer_output_remaps places it at home)"
                )
    return None


def channel_problem(job: dict[str, Any]) -> Optional[str]:
    """Why this job may not leave for a site, or None: the first channel it asks for."""
    return acting_problem(job) or _list_problem(job) or _environment_problem(job)


def acting_problem(job: dict[str, Any]) -> Optional[str]:
    """The first ACTING_ATTRS member the job asks for, in one line (ClassAd names are
    case-insensitive: the starter finds a `+precmd` as PreCmd)."""
    present = {name.lower(): (name, value) for name, value in job.items()}
    for attr, words in ACTING_ATTRS.items():
        name, value = present.get(attr.lower(), (attr, None))
        if asks_for(attr, value):
            return (
                f"it sets {name}: {words}, outside the job's container as the site "
                "account every export shares"
            )
    return None
