"""The OpenSSH carrier: each command is one `ssh -S <socket>` process riding a master.

For sites that ask for a one-time code (`auth = "mfa"`): the master is the site's login
(`login.open_login`, opened once by a person) or, at a site that allows no connection
sharing, one this process holds for its whole life (`held=True`, asked for once). Every
command runs with BatchMode, so it never prompts: with no master it fails at once with
LoginNeeded. Host keys are pinned as for fabric (StrictHostKeyChecking=yes against the
profile's known_hosts).

A site without connection sharing (sshd `MaxSessions 1`) lets the held master carry one
session at a time: lumberjack runs its commands one after another, and a session refused
while the previous one is still closing is tried again after a short pause.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

from lumberjack.errors import LoginNeeded, RemoteError
from lumberjack.profiles.sites import SiteProfile
from lumberjack.transport import login
from lumberjack.transport.carrier import Consume, Feed, LinkLost, RunResult
from lumberjack.transport.messages import CHUNK, last_line, short

# ssh's own words when the link, not the command, failed (it exits 255 then).
_LINK_LOST = re.compile(
    r"mux_client|Control socket|client_loop|Connection (closed|reset|timed out)|"
    r"Broken pipe|Timeout, server|packet_write|Connection to \S+ closed"
)
# Under sshd's MaxSessions 1 the next session may be refused while the last one closes.
_SESSION_REFUSED = re.compile(r"Session open refused|open failed")
_RETRIES = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)


class OpenSshCarrier:
    """A `Carrier` over an OpenSSH master: the site's login, or one held by this process."""

    def __init__(self, profile: SiteProfile, *, held: bool = False) -> None:
        self.profile = profile
        self.held = held
        self.address = f"{profile.login_host}:{profile.port}"
        self.path: Path = login.socket_path(profile, held=held)
        self._open = False

    def open(self) -> None:
        if self._open:
            return
        if self.held:
            login.start_master(self.profile, self.path, login.HELD_IDLE_S)
        else:
            now = login.state(self.profile)
            if not now.live:
                raise LoginNeeded(login.needs_login(self.profile, now.expired))
        self._open = True

    def close(self) -> None:
        if self.held and self._open:
            login.control(self.profile, self.path, "exit")
            self.path.unlink(missing_ok=True)
        self._open = False

    def _argv(self, command: str) -> list[str]:
        return [
            login.ssh_program(), "-S", str(self.path), "-o", "ControlMaster=no",
            "-o", "BatchMode=yes", "-o", "KbdInteractiveAuthentication=no",
            "-o", "PasswordAuthentication=no", "-T", "-e", "none",
            *login.ssh_options(self.profile), self.profile.login_host, "--", command,
        ]  # fmt: skip

    def exec(
        self,
        command: str,
        *,
        feed: Feed | None = None,
        consume: Consume | None = None,
        timeout: float | None = None,
    ) -> RunResult:
        self.open()
        for pause in (*_RETRIES, None):
            result, failure = self._exec_once(command, feed, consume, timeout)
            refused = result.exited == 255 and _SESSION_REFUSED.search(result.stderr)
            if not refused:
                break
            if pause is None:
                why = last_line(result.stderr)
                raise RemoteError(f"{self.address}: the site keeps refusing a session ({why})")
            time.sleep(pause)
        if result.exited == 255 and not result.stdout:
            if not self.path.exists() or "Permission denied" in result.stderr:
                raise LoginNeeded(login.needs_login(self.profile))
            if _LINK_LOST.search(result.stderr):
                raise LinkLost(last_line(result.stderr))
            if "Host key verification failed" in result.stderr:
                raise login.ssh_error(self.profile, result.stderr)
        if failure is not None:
            raise failure
        return result

    def _exec_once(
        self, command: str, feed: Feed | None, consume: Consume | None, timeout: float | None
    ) -> tuple[RunResult, BaseException | None]:
        """One ssh process; its result, and the first exception of feed or consume (to
        raise unless the session was refused)."""
        proc = subprocess.Popen(
            self._argv(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdin and proc.stdout and proc.stderr
        failures: list[BaseException] = []
        errors = bytearray()
        timed_out = threading.Event()

        def feeder() -> None:
            try:
                if feed is not None:
                    feed(proc.stdin.write)
            except BrokenPipeError:
                pass  # ssh ended: its exit status and stderr say why
            except BaseException as exc:  # re-raised in the calling thread
                failures.append(exc)
                proc.kill()  # as a dropped channel: the command gets no more input
            finally:
                try:
                    proc.stdin.close()
                except BrokenPipeError:
                    pass

        def drain_stderr() -> None:
            while data := proc.stderr.read1(CHUNK):
                errors.extend(data)

        def expire() -> None:
            timed_out.set()
            proc.kill()

        threads = [
            threading.Thread(target=feeder, daemon=True),
            threading.Thread(target=drain_stderr, daemon=True),
        ]
        for thread in threads:
            thread.start()
        timer = threading.Timer(timeout, expire) if timeout else None
        if timer is not None:
            timer.start()
        stdout = b""
        try:
            if consume is not None:
                try:
                    consume(proc.stdout)
                except BaseException as exc:
                    failures.append(exc)
                    proc.kill()
            else:
                stdout = proc.stdout.read()
            exited = proc.wait()
            for thread in threads:
                thread.join()
        finally:
            if timer is not None:
                timer.cancel()
            proc.stdout.close()
            proc.stderr.close()
        if timed_out.is_set():
            raise RemoteError(
                f"{self.address}: no answer within {timeout:g} s from: {short(command)}"
            )
        result = RunResult(
            command,
            stdout.decode("utf-8", "replace"),
            errors.decode("utf-8", "replace"),
            exited,
        )
        return result, (failures[0] if failures else None)
