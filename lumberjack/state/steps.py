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

from lumberjack.ap.agent_zipapp import agent_command, shipped_agent
from lumberjack.core import agent_loader, crashpoints
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

    def holds(self, layout: ExportLayout) -> bool:
        """Whether anything of the export (or lease) is at the site: its directory."""
        return self.conn.run(f"test -d {shlex.quote(layout.root)}", check=False).exited == 0

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

    def put_agent(self, layout: ExportLayout) -> None:
        """This access point's site agent in lumberjack's directory beside the export's
        (the account's only), unless a file of its name is there: a wrong one is refused
        when it would run, not silently replaced. Idempotent."""
        agent = shipped_agent()
        directory = shlex.quote(layout.agent_dir)
        path = layout.agent_file(agent.sha256)
        there = f"mkdir -p {directory} && chmod 700 {directory} && test -f {shlex.quote(path)}"
        if not self.conn.run(there, check=False).ok:
            self.conn.put_bytes(agent.data, path, 0o500)

    def run_agent(self, layout: ExportLayout, *args: str, env: str = "") -> Any:
        """The verified site agent run with `args` (`env`: assignments before it); its
        result, whatever it answered. Shipped first when the site has no agent of this
        content yet (a first export there, a new lumberjack); SetupError when the file
        there is not that agent: something changed it, and retrying cannot help."""
        agent = shipped_agent()
        line = env + agent_command(layout.agent_file(agent.sha256), agent.sha256, *args)
        result = self.conn.run(line, check=False)
        if result.exited == agent_loader.MISSING:
            self.put_agent(layout)
            result = self.conn.run(line, check=False)
        if result.exited == agent_loader.ALTERED:
            detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise SetupError(
                f"site {self.profile.name}: {detail} (nothing was run; a person should check "
                "the site account, then remove that file)"
            )
        return result

    def agent(self, layout: ExportLayout, command: str) -> Any:
        """Run the site agent; its answer (core/answers.ANSWERS[command]), decoded
        strictly, or RemoteError with its one-line reason (SetupError when that reason is
        a setup mistake, or the agent file was changed: retrying cannot help;
        ContractError, a RemoteError too, when the answer is not of its type)."""
        point = crashpoints.armed()
        # The agent's own crash points (tests): the same variable, over SSH (-I keeps it).
        env = f"{crashpoints.ENV}={shlex.quote(point)} " if point else ""
        result = self.run_agent(layout, command, layout.root, env=env)
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
        the site instead of one per export), kept in `statuses`. It is lumberjack's
        verified agent, no export's own, so it may answer for all (they are the same
        account's, below the same base_dir); each export the call did not answer is
        then asked on its own."""
        if len(layouts) < 2:
            return
        roots = [layout.root for layout in layouts]
        try:
            result = self.run_agent(layouts[0], "status", *roots)
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
