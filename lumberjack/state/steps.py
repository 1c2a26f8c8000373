"""What a step is: the site of one command (its profile and one connection, opened on
first use), the export's layout there, the check that the phase table allows the step
from the export's phase, and the record of the step in the ledger before and after it
acts (`run_step`). The steps themselves are in lifecycle.py; leases take theirs the
same way.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable

from lumberjack.core import crashpoints
from lumberjack.core.answers import Acted, Answer, Failed, Status, Statuses, read_answer
from lumberjack.core.contract import (
    ExportLayout,
    LaunchPlan,
    QueueActions,
    encode,
    lease_dir_name,
)
from lumberjack.core.records import ContractError, decode, to_json
from lumberjack.core.setup_failures import is_setup_failure
from lumberjack.errors import BadInput, Busy, LumberjackError, RemoteError, SetupError
from lumberjack.profiles.sites import SiteProfile, find_profile
from lumberjack.state import phases
from lumberjack.state.ledger import ExportRecord, Ledger
from lumberjack.transport.recording import record as record_message

if TYPE_CHECKING:
    from lumberjack.transport import Progress


class Site:
    """The site of one command: its profile and (opened on first use) one connection.

    `hold`: the command may hold a connection of its own that asks a person once (at an
    MFA site that allows no connection sharing); cron's `sync` may not. A connection
    that could not be opened is not tried again by the same command: its error repeats.
    """

    def __init__(
        self, profile: SiteProfile, *, progress: Progress | None = None, hold: bool = True
    ) -> None:
        self.profile = profile
        self.progress = progress
        self.hold = hold
        self._conn: Any = None
        self._failed: LumberjackError | None = None
        #: export directory -> the agent's status answer, asked for many at once by
        #: `sync` (`prefetch_status`); each is used once, by `refresh_status`.
        self.statuses: dict[str, Status] = {}

    @property
    def conn(self) -> Any:
        if self._failed is not None:
            raise self._failed
        if self._conn is None:
            from lumberjack.transport import SiteConnection

            try:
                conn = SiteConnection(self.profile, hold=self.hold)
                conn.open()
            except LumberjackError as exc:
                self._failed = exc
                raise
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Site:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def export_dir(self, name: str) -> str:
        """The export's directory at the site (base_dir's variables expanded there)."""
        return posixpath.join(self.conn.expand(self.profile.base_dir), name)

    def lease_dir(self, name: str) -> str:
        """Lease `name`'s directory at the site, beside the exports' (`export` and `lease
        create` both refuse a directory that exists, so the two never meet)."""
        return self.export_dir(lease_dir_name(name))

    def refuse_existing(self, remote_dir: str, earlier: str, rename: str) -> None:
        """BadInput when `remote_dir` exists: an earlier `earlier` (export, lease) of that
        name left it, and reusing it would mix the two."""
        if self.conn.run(f"test -e {shlex.quote(remote_dir)}", check=False).ok:
            raise BadInput(
                f"{remote_dir} already exists at site {self.profile.name}: an earlier "
                f"{earlier} of that name; choose another {rename} (or remove that directory)"
            )

    def put_launch_plan(self, layout: ExportLayout, plan: LaunchPlan) -> None:
        """launch.json: the plan the agent starts a pool and its pilots by, readable by
        the site account only."""
        text = encode(plan)
        record_message("launch.json", text)
        self.conn.put_bytes(text.encode(), layout.launch_plan, 0o600)

    def act(self, layout: ExportLayout, actions: QueueActions) -> Acted:
        """The local queue's commands taken on the jobs' copies at the site: written as
        queue-actions.json (the site account's only), then the agent's `act`."""
        text = encode(actions)
        record_message("queue-actions.json", text)
        self.conn.put_bytes(text.encode(), layout.queue_actions, 0o600)
        answer: Acted = self.agent(layout, "act")
        return answer

    def agent(self, layout: ExportLayout, command: str) -> Any:
        """Run the site agent; its answer (core/answers.ANSWERS[command]), decoded
        strictly, or RemoteError with its one-line reason (SetupError when that reason is
        a setup mistake: retrying cannot help; ContractError, a RemoteError too, when the
        answer is not of its type)."""
        line = f"python3 {shlex.quote(layout.agent)} {command} {shlex.quote(layout.root)}"
        point = crashpoints.armed()
        if point:  # the agent's own crash points (tests): the same variable, over SSH
            line = f"{crashpoints.ENV}={shlex.quote(point)} {line}"
        result = self.conn.run(line, check=False)
        lines = result.stdout.strip().splitlines()
        if not lines or not lines[-1].startswith("{"):
            detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise RemoteError(f"site agent {command} failed: {detail}")
        text = lines[-1]
        record_message(command, text)
        try:
            answer: Answer = read_answer(command, text, f"site agent {command} answer")
        except ContractError as exc:  # a site's word, refused whole: one line, nothing used
            raise RemoteError(str(exc)) from None
        if isinstance(answer, Failed):
            kind = SetupError if is_setup_failure(answer.error) else RemoteError
            raise kind(f"site agent {command}: {answer.error}")
        return answer

    def prefetch_status(self, layouts: list[ExportLayout]) -> None:
        """The status of several exports in one call of the site agent (one process at
        the site instead of one per export), kept in `statuses`. The agent shipped with
        the first export answers for all (they are the same account's, below the same
        base_dir); an agent too old to take several directories answers nothing here,
        and each export is then asked on its own, as is any the call did not answer."""
        if len(layouts) < 2:
            return
        roots = [layout.root for layout in layouts]
        line = shlex.join(["python3", layouts[0].agent, "status", *roots])
        try:
            result = self.conn.run(line, check=False)
            text = result.stdout.strip().splitlines()[-1]
            record_message("status-many", text)
            answer = decode(Statuses, text, "site agent status answer")
        except (LumberjackError, ValueError, IndexError):  # ContractError is a ValueError
            return
        self.statuses.update((root, answer.answers[root]) for root in roots
                             if root in answer.answers)  # fmt: skip


def site_for(record: ExportRecord, *, progress: Progress | None = None, hold: bool = True) -> Site:
    if not record.site:
        raise BadInput(f"export {record.name!r} is an offline bundle (no site); use import --in")
    return Site(find_profile(record.site), progress=progress, hold=hold)


def layout_of(record: ExportRecord) -> ExportLayout:
    remote_dir = record.info.get("remote_dir")
    if not remote_dir:
        raise BadInput(f"export {record.name!r} has no site directory recorded")
    return ExportLayout(remote_dir)


def check_phase(record: ExportRecord, step: str) -> None:
    """BadInput (nothing changed) when the table has no `step` from the export's phase."""
    phases.check(record.phase, step, record.name)


@contextmanager
def reported(entry: dict[str, Any]) -> Iterator[None]:
    """One line of `sync`'s answer: a lock another process holds skips it, an error is
    written into it (with its exit code) instead of ending the round."""
    try:
        yield
    except Busy:
        entry["steps"] = ["busy: skipped"]
    except LumberjackError as exc:
        entry["error"] = str(exc)
        entry["exit_code"] = exc.exit_code


def run_step(ledger: Ledger, name: str, step: str, action: Callable[[], dict]) -> dict:
    """`action`, recorded in the ledger under `name` (an export's, or ledger.lease_key's)
    before it acts and after: done with its answer, or failed with the error."""
    ledger.step(name, step, "started")
    try:
        result = action()
    except Exception as exc:
        ledger.step(name, step, "failed", str(exc))
        raise
    ledger.step(name, step, "done", json.dumps(to_json(result), default=str)[:2000])
    return result
