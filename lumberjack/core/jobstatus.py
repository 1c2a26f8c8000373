"""HTCondor's JobStatus codes and the words lumberjack uses for them (both sides)."""

from __future__ import annotations

from enum import IntEnum


class JobStatus(IntEnum):
    IDLE = 1
    RUNNING = 2
    REMOVED = 3
    COMPLETED = 4
    HELD = 5
    TRANSFERRING_OUTPUT = 6
    SUSPENDED = 7

    @property
    def word(self) -> str:
        """The lower-case word in messages and JSON: "transferring_output"."""
        return self.name.lower()

    @property
    def title(self) -> str:
        """The word as condor_q shows it: "Transferring Output"."""
        return self.name.replace("_", " ").title()


#: A job in one of these will not run again where it is: the site's word is final.
FINAL = frozenset({JobStatus.REMOVED, JobStatus.COMPLETED, JobStatus.HELD})
#: Every job in one of these: the export's work is over.
FINISHED = frozenset({JobStatus.COMPLETED, JobStatus.REMOVED})


def status_of(value: object) -> JobStatus | None:
    """The status for an int or the job_queue.log text ("4"), None if it is none."""
    try:
        return JobStatus(int(str(value).strip()))
    except (TypeError, ValueError):
        return None


def word_of(value: object) -> str:
    """The lower-case word for a status value, or the value itself if it is unknown."""
    status = status_of(value)
    return status.word if status is not None else str(value)
