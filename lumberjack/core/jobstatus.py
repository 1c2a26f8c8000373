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


#: A job in one of these comes home as it is: the site's word is final (a held one the
#: site may still release is waited for first: see can_run_again).
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


#: PeriodicRelease texts that never release a job (condor_submit writes `false`).
_NEVER_RELEASES = frozenset({"false", "0", "undefined", "error"})


def may_be_released(periodic_release: str | None) -> bool:
    """Whether a held job's PeriodicRelease (its text in the queue) could release it:
    anything but absent or literally false. Not evaluated: the schedd that holds the
    job does that, every PERIODIC_EXPR_INTERVAL."""
    text = (periodic_release or "").strip()
    while text.startswith("(") and text.endswith(")"):
        text = text[1:-1].strip()
    return bool(text) and text.lower() not in _NEVER_RELEASES


def can_run_again(
    status: JobStatus | None,
    *,
    periodic_release: str | None = None,
    held_since: float = 0,
    window_s: float = 0,
    now: float = 0,
) -> bool:
    """Whether a job in `status` may still run where it is. Completed and removed jobs
    never do; a held one only if its PeriodicRelease may release it and it was held less
    than `window_s` ago (the pilots' walltime: no pilot that saw it held lives longer, so
    the export then comes home with it held). Any other status is live."""
    if status in FINISHED:
        return False
    if status is not JobStatus.HELD:
        return True
    if not may_be_released(periodic_release):
        return False
    return now < held_since + window_s
