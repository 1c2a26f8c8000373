"""Which failures reported by the site agent are setup mistakes: a person must fix the
profile, the allocation or the site image; cron retrying every minute cannot help.

The agent reports a failure as one line of text (its own, or the batch system's quoted);
the access point matches that line here, so agents already shipped are classified too.
"""

from __future__ import annotations

import re

#: The batch systems' and the agent's own words for a mistake in what was set up.
SETUP_FAILURES = re.compile(
    "|".join((
        r"invalid account",  # Slurm: an allocation (--account) the site does not know
        r"invalid partition",  # Slurm: a queue the profile names wrong
        r"invalid qos",  # Slurm: a QOS the profile names wrong
        r"invalid feature specification",  # Slurm: a -C constraint the site does not have
        r"unknown queue",  # PBS
        r"unauthorized request",  # PBS: the account may not use that queue or project
        r"site image \S+ not found",  # the agent: the profile's image is not there
        r"no HTCondor release at",  # the agent (runtime none): no release where it says
    )),
    re.IGNORECASE,
)  # fmt: skip


def is_setup_failure(text: str) -> bool:
    """Whether the agent's one-line failure `text` names a setup mistake."""
    return SETUP_FAILURES.search(text) is not None
