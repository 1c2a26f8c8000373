"""`BatchSystem`: the work every batch system shares. A system is one small subclass
that names its commands, its job-id pattern, its state words and its environment
variables, and writes only its header (directive) lines and its query-output reader.

The pilot script itself is one template file beside this module (`pilot.sh.tmpl`, see
its comments for the timer and the traps; site/templating.py fills it); a system may
bring its own (`TEMPLATE`).
"""

from __future__ import annotations

import abc
import re
import shlex
from collections.abc import Sequence
from typing import ClassVar

from lumberjack.core.units import format_walltime as hhmmss
from lumberjack.site.batch.launchers import LAUNCHERS
from lumberjack.site.batch.pilot import PilotSpec, PilotState, PilotStatus
from lumberjack.site.templating import render


class BatchError(Exception):
    """The batch system refused or failed a command; the message is one line and quotes
    the batch system's own error text."""


def _first_error_line(text: str) -> str:
    """The most telling line of a batch command's error output, for one-line messages."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower():
            return line
    return lines[-1] if lines else ""


def command_failed(what: str, returncode: int, stdout: str, stderr: str) -> BatchError:
    detail = _first_error_line(stderr) or _first_error_line(stdout) or "no output"
    return BatchError(f"{what} failed (exit code {returncode}): {detail}")


def _block(lines: Sequence[str]) -> str:
    """Lines as a paragraph of the script (a blank line before it), or nothing."""
    return "\n" + "\n".join(lines) + "\n" if lines else ""


class BatchSystem(abc.ABC):
    """One batch system: render a pilot script, submit it, ask about it, cancel it."""

    NAME: ClassVar[str]  # the name site profiles use ("slurm")
    TITLE: ClassVar[str]  # as people write it, for messages ("Slurm")
    DIRECTIVE: ClassVar[str]  # the header lines' prefix ("#SBATCH")
    LAUNCHERS: ClassVar[tuple[str, ...]]  # launcher names it allows; the first is default
    SUBMIT: ClassVar[tuple[str, ...]]  # argv before the script's path
    QUERY: ClassVar[tuple[str, ...]]  # argv before the job ids
    CANCEL: ClassVar[tuple[str, ...]]  # argv before the job ids
    JOB_ID: ClassVar[re.Pattern[str]]  # one whole line of the submit output: the job id
    JOB_ID_ENV: ClassVar[str]  # inside a pilot (on every node): its job id
    NODE_LIST_ENV: ClassVar[str]  # inside a pilot: names its nodes
    NODE_NAME_ENV: ClassVar[str] = ""  # on a node: its name ("" = `hostname -s`)
    STATES: ClassVar[dict[str, PilotState]]  # the system's state words
    GONE: ClassVar[tuple[str, ...]] = ()  # query errors (lower case) meaning "no such job"
    SILENT_GONE: ClassVar[bool] = False  # a failed query with no output means the same
    TEMPLATE: ClassVar[str] = "pilot.sh.tmpl"

    # ---- what each system writes ---------------------------------------------------

    @abc.abstractmethod
    def header_lines(self, spec: PilotSpec) -> list[str]:
        """The directive lines for this pilot (without the profile's extra ones)."""

    @abc.abstractmethod
    def read_jobs(self, stdout: str) -> dict[str, PilotStatus]:
        """The query command's output -> status per job id it lists."""

    def state(self, raw: str) -> PilotState:
        return self.STATES.get(raw, PilotState.UNKNOWN)

    def find(self, jobs: dict[str, PilotStatus], job_id: str) -> PilotStatus | None:
        """The status of `job_id` among those the query listed, None if absent."""
        return jobs.get(job_id.strip())

    # ---- shared ----------------------------------------------------------------------

    def launch_line(self, spec: PilotSpec) -> str:
        """The launcher line of `launch_on_all_nodes`, started in the background."""
        return f"{LAUNCHERS[spec.launcher or self.LAUNCHERS[0]](spec)} &"

    def render_pilot_script(self, spec: PilotSpec) -> str:
        """The whole pilot script, ready to write (executable: Cobalt requires it)."""
        if spec.launcher not in ("", *self.LAUNCHERS):
            raise ValueError(
                f"{self.NAME} pilots launch with {' or '.join(self.LAUNCHERS)}, "
                f"not {spec.launcher!r}"
            )
        environment = [f"export {key}={shlex.quote(spec.env[key])}" for key in sorted(spec.env)]
        setup = []
        if spec.setup_lines:
            setup = [
                "# site setup from the profile; module scripts trip over `set -u`",
                "set +u",
                *spec.setup_lines,
                "set -u",
            ]
        return render(
            __package__,
            self.TEMPLATE,
            directives="\n".join([*self.header_lines(spec), *spec.extra_directives]),
            name=spec.name,
            system=self.NAME,
            nodes=spec.nodes,
            nodes_env=self.NODE_LIST_ENV,
            walltime=hhmmss(spec.walltime_s),
            retire_before=hhmmss(spec.retire_s),
            retire_after=hhmmss(spec.retire_after_s),
            environment=_block(environment),
            setup=_block(setup),
            retire_after_s=spec.retire_after_s,
            launch=self.launch_line(spec),
            retire_command=spec.retire_command,
        )

    def submit_command(self, script_path: str) -> list[str]:
        return [*self.SUBMIT, script_path]

    def parse_submit_output(self, stdout: str, stderr: str = "", returncode: int = 0) -> str:
        """The job id from the submit command's output; BatchError when it failed.
        The last line that is a job id wins: warnings may come before it."""
        command = self.SUBMIT[0]
        if returncode != 0:
            raise command_failed(command, returncode, stdout, stderr)
        lines = [line.strip() for line in stdout.splitlines() if line.strip()]
        for line in reversed(lines):
            match = self.JOB_ID.fullmatch(line)
            if match:
                return match.group("job_id")
        raise BatchError(f"{command} printed no job id: {lines[-1] if lines else 'nothing'}")

    def query_command(self, job_ids: Sequence[str]) -> list[str]:
        return [*self.QUERY, *job_ids]

    def parse_query_details(
        self, stdout: str, job_ids: Sequence[str], stderr: str = "", returncode: int = 0
    ) -> dict[str, PilotStatus]:
        """State and raw words for every id in job_ids; BatchError when the query failed.
        A job the answer does not list has ended: the batch system has forgotten it."""
        if returncode != 0 and not self._only_gone(stdout, stderr):
            raise command_failed(self.QUERY[0], returncode, stdout, stderr)
        jobs = self.read_jobs(stdout)
        gone = PilotStatus(PilotState.DONE, "", f"no longer listed by {self.TITLE}")
        result = {}
        for job_id in job_ids:
            status = self.find(jobs, job_id)
            result[job_id] = gone if status is None else status
        return result

    def parse_query_output(
        self, stdout: str, job_ids: Sequence[str], stderr: str = "", returncode: int = 0
    ) -> dict[str, PilotState]:
        """The state of every id in job_ids; BatchError when the query failed."""
        details = self.parse_query_details(stdout, job_ids, stderr, returncode)
        return {job_id: status.state for job_id, status in details.items()}

    def cancel_command(self, job_ids: Sequence[str]) -> list[str]:
        return [*self.CANCEL, *job_ids]

    def _only_gone(self, stdout: str, stderr: str) -> bool:
        """A failed query whose every error line says the job is unknown (or, where the
        system answers so, that printed nothing at all): every job asked about ended."""
        errors = [line.lower() for line in stderr.splitlines() if line.strip()]
        if not errors:
            return self.SILENT_GONE and not stdout.strip()
        return all(any(text in line for text in self.GONE) for line in errors)
