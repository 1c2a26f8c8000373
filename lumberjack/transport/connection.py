"""`SiteConnection`: everything one lumberjack command does at a site, over one carrier.

    with SiteConnection(profile) as site:
        root = site.expand(profile.base_dir)          # $VARS and ~ resolved by the site
        site.upload(bundle / "spool", f"{root}/spool", manifest.files, progress=bar)

One connection per command (so at most one login prompt); commands, the site agent's
calls and transfers all run on it through its `Carrier` (`carrier_for` chooses one from
the site's profile unless one is given).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lumberjack.core.manifest import FileEntry
from lumberjack.core.returns import Limits
from lumberjack.core.shell_safe import REMOTE_PATH
from lumberjack.errors import BadInput, LoginNeeded, RemoteError
from lumberjack.profiles.sites import SiteProfile
from lumberjack.transport import transfer
from lumberjack.transport.carrier import Carrier, LinkLost, RunResult
from lumberjack.transport.fabric_carrier import CONNECT_TIMEOUT, FabricCarrier
from lumberjack.transport.helper import helper_command
from lumberjack.transport.messages import CHUNK, last_line, short
from lumberjack.transport.openssh_carrier import OpenSshCarrier
from lumberjack.transport.states import FileState, TransferReport
from lumberjack.transport.transfer import Progress

# Remote paths we let the site's shell expand: the characters a site profile may use.
_EXPANDABLE = REMOTE_PATH
# What an expanded path may not hold: it is quoted into later commands.
_BAD_RESULT = re.compile(r"[\x00-\x1f\x7f'\"`\\]")


def carrier_for(
    profile: SiteProfile, *, hold: bool = True, connect_timeout: float = CONNECT_TIMEOUT
) -> Carrier:
    """How this command reaches the site.

    - `auth = "mfa"`: the site's login (an OpenSSH master a person opened once); with
      none, LoginNeeded before any connection is tried. Where the site allows no
      connection sharing there is no login to ride: the command holds an OpenSSH master
      of its own, asking once (`hold`; without it LoginNeeded says to use `sync --watch`).
    - `auth = "key"`: fabric, unless the person opened a login for the site anyway (a
      key with a passphrase, a site that limits connections per minute): then that one,
      since it costs the site no new authentication.
    """
    from lumberjack.transport import login

    if profile.auth == "mfa" and not profile.connection_sharing:
        if not hold:
            raise LoginNeeded(
                f"site {profile.name} asks for a one-time code and allows no connection "
                "sharing, so no login can be kept for cron: run condor_lumberjack sync "
                "--watch in a terminal multiplexer (it asks once and holds one connection)"
            )
        return OpenSshCarrier(profile, held=True)
    if profile.auth == "mfa":
        return OpenSshCarrier(profile)
    if login.socket_path(profile).exists() and login.state(profile).live:
        return OpenSshCarrier(profile)
    return FabricCarrier(profile, connect_timeout=connect_timeout)


class SiteConnection:
    """One connection to a site's login node, for every step of one command."""

    def __init__(
        self,
        profile: SiteProfile,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        carrier: Carrier | None = None,
        hold: bool = True,
    ) -> None:
        self.profile = profile
        self.carrier: Carrier = carrier or carrier_for(
            profile, hold=hold, connect_timeout=connect_timeout
        )
        self.address = self.carrier.address
        self._expanded: dict[str, str] = {}

    def __enter__(self) -> SiteConnection:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        self.carrier.open()

    def close(self) -> None:
        self.carrier.close()

    # -- commands

    def run(
        self,
        command: str,
        *,
        check: bool = True,
        stdin: bytes | None = None,
        timeout: float | None = None,
    ) -> RunResult:
        """Run a command at the site quietly; RemoteError (one line) if check and it fails."""
        feed = None
        if stdin is not None:
            data = stdin

            def feed(send: Callable[[bytes], Any]) -> None:
                for start in range(0, len(data), CHUNK):
                    send(data[start : start + CHUNK])

        try:
            result = self.carrier.exec(command, feed=feed, timeout=timeout)
        except LinkLost as exc:
            raise RemoteError(f"{self.address}: connection lost during {short(command)}") from exc
        if check and not result.ok:
            raise RemoteError(
                f"site {self.address}: `{short(command)}` failed (exit {result.exited}): "
                + last_line(result.stderr)
            )
        return result

    def put_bytes(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        """Write a whole remote file or nothing (temp file, fsync, rename)."""
        target = self.expand(remote_path)
        self.run(helper_command("put", target, f"{mode:o}"), stdin=data)

    def expand(self, path: str) -> str:
        """`path` with $VARS and ~ resolved by the site's shell (an unset variable is an
        error); the result is absolute and holds no quotes or newlines."""
        if path in self._expanded:
            return self._expanded[path]
        if not _EXPANDABLE.match(path):
            raise BadInput(
                f"remote path {path!r} has characters lumberjack does not pass to a shell; "
                "use letters, digits and _ . / $ { } ~ @ : + , = -"
            )
        if "$" not in path and "~" not in path:
            result = path
        else:
            # sh -u: an unset $VAR is an error, not an empty string that lands in /.
            inner = f"set -u; printf %s {path}"
            answer = self.run(f"/bin/sh -c {shlex.quote(inner)}", check=False, timeout=60)
            if not answer.ok:
                raise RemoteError(
                    f"site {self.address} cannot expand {path}: {last_line(answer.stderr)}"
                )
            result = answer.stdout
        if not result.startswith("/") or _BAD_RESULT.search(result):
            raise RemoteError(f"site {self.address} expanded {path} to {result!r}; refusing it")
        result = result.rstrip("/") or "/"
        self._expanded[path] = result
        return result

    def home(self) -> str:
        return self.expand("$HOME")

    # -- transfers (lumberjack.transport.transfer)

    def scan(
        self,
        remote_root: str,
        want: dict[str, int] | None = None,
        exclude: Sequence[str] = (),
    ) -> dict[str, FileState]:
        """Kind, size, sha256 and mode of the files below remote_root (see transfer.scan)."""
        return transfer.scan(self, remote_root, want, exclude)

    def upload(
        self,
        local_root: Path,
        remote_root: str,
        files: list[FileEntry],
        *,
        progress: Progress | None = None,
        open_source: transfer.OpenSource | None = None,
    ) -> TransferReport:
        """Make remote_root hold `files` exactly, verified (see transfer.upload)."""
        return transfer.upload(self, local_root, remote_root, files, progress, open_source)

    def download(
        self,
        remote_root: str,
        local_root: Path,
        *,
        exclude: Sequence[str] = (),
        progress: Progress | None = None,
        limits: Limits | None = None,
        max_files: int | None = None,
        job_log: str | None = None,
    ) -> TransferReport:
        """Make local_root hold the regular files below remote_root, verified and within
        `limits` and `max_files`; of a job over a per-job cap only its `job_log` (see
        transfer.download)."""
        return transfer.download(
            self, remote_root, local_root, exclude, progress, limits, max_files, job_log
        )
