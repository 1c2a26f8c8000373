"""Logins: OpenSSH master connections a person opens once and later commands ride.

A login is an `ssh -M` master on a control socket in a 0700 directory of the user's
(`<state dir>/ssh/<site>`), with a record beside it (`<site>.json`: when it was opened
and until when lumberjack uses it). The person answers the site's prompts (one-time
code, password, key passphrase) once, on the terminal; every later command, and `sync`
from cron, runs `ssh -S <socket> -o BatchMode=yes`, which never prompts.

A site that allows no connection sharing keeps no login: a long-running command
(`sync --watch`, `run --wait`) or a single command at a terminal opens a master of its
own (`held`), asks once, and closes it when it ends.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lumberjack.core.message_text import one_line
from lumberjack.errors import BadInput, LoginNeeded, LumberjackError, RemoteError, SetupError
from lumberjack.host.state_home import state_dir
from lumberjack.profiles.sites import SiteProfile
from lumberjack.transport import hostkeys
from lumberjack.transport.messages import last_line

CONNECT_TIMEOUT = 20
#: How long a login lasts unless the profile's site or --persist says otherwise.
DEFAULT_PERSIST_S = 12 * 3600
#: A held master ends this long after its last command if its process died without
#: closing it.
HELD_IDLE_S = 3600
# sun_path holds 108 bytes; ssh first binds "<path>.<16 random characters>".
_SOCKET_MAX = 107 - 17


def control_dir() -> Path:
    """The 0700 directory of the control sockets (made, and tightened, on use)."""
    directory = state_dir() / "ssh"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = directory.stat()
    if info.st_uid != os.geteuid():
        raise BadInput(f"{directory} belongs to another user; lumberjack keeps logins there")
    if info.st_mode & 0o077:
        os.chmod(directory, 0o700)
    return directory


def socket_path(profile: SiteProfile, held: bool = False) -> Path:
    """The control socket of the site's login (or of this process's held master)."""
    name = f"{profile.name}.{os.getpid()}" if held else profile.name
    path = control_dir() / name
    if len(os.fsencode(path)) > _SOCKET_MAX:
        raise BadInput(
            f"{path} is too long for an SSH control socket; set $LUMBERJACK_STATE_DIR to "
            "a shorter directory"
        )
    return path


def _record_path(profile: SiteProfile) -> Path:
    return control_dir() / f"{profile.name}.json"


def ssh_program() -> str:
    program = shutil.which("ssh")
    if program is None:
        raise BadInput("the OpenSSH client (ssh) is not installed; MFA sites need it")
    return program


def ssh_options(profile: SiteProfile) -> list[str]:
    """What every ssh run of the site says: the pinned host key, the profile's key and
    user, the port."""
    known_hosts = hostkeys.known_hosts_file(profile)
    options = [
        "-p", str(profile.port),
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "UpdateHostKeys=no",
        "-o", f"ConnectTimeout={CONNECT_TIMEOUT}",
    ]  # fmt: skip
    identity = hostkeys.identity_file(profile)
    if identity is not None:
        options += ["-i", str(identity), "-o", "IdentitiesOnly=yes"]
    if profile.user:
        options += ["-l", profile.user]
    return options


def control(profile: SiteProfile, path: Path, operation: str) -> bool:
    """`ssh -O check|exit` on the socket at `path` (no network): whether it answered."""
    if not path.exists():
        return False
    result = subprocess.run(
        [ssh_program(), "-S", str(path), "-O", operation, *ssh_options(profile),
         profile.login_host],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=30,
    )  # fmt: skip
    return result.returncode == 0


def can_prompt() -> bool:
    """Whether ssh can ask a person: a terminal, or an askpass program it must use.
    Without either, ssh would send empty answers that count as failed logins."""
    if os.environ.get("SSH_ASKPASS") and (
        os.environ.get("SSH_ASKPASS_REQUIRE") == "force" or os.environ.get("DISPLAY")
    ):
        return True
    try:
        os.close(os.open("/dev/tty", os.O_RDWR))
    except OSError:
        return False
    return True


def start_master(profile: SiteProfile, path: Path, persist_s: int) -> None:
    """Open a master on `path`: ssh asks the person on the terminal (or askpass) once,
    then stays in the background for `persist_s` seconds after its last command."""
    # A key site logs in without asking (the agent or an unprotected key): no terminal
    # is needed there, and its message must not speak of a one-time code.
    if profile.auth == "mfa" and not can_prompt():
        raise LoginNeeded(
            f"site {profile.name} asks for a one-time code and there is no terminal to "
            f"ask on; run condor_lumberjack login {profile.name} in a terminal"
        )
    if path.exists() and not control(profile, path, "check"):
        path.unlink()  # a master that died leaves its socket
    result = subprocess.run(
        [ssh_program(), "-M", "-N", "-f", "-S", str(path),
         "-o", f"ControlPersist={persist_s}", "-o", "NumberOfPasswordPrompts=1",
         "-o", "ServerAliveInterval=30", "-o", "ServerAliveCountMax=4",
         *ssh_options(profile), profile.login_host],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    if result.returncode != 0:
        raise ssh_error(profile, result.stderr.decode("utf-8", "replace"), login=True)


def ssh_error(profile: SiteProfile, stderr: str, *, login: bool = False) -> LumberjackError:
    """What ssh's failure to connect or log in means, in one line that says what to do."""
    known_hosts = hostkeys.known_hosts_file(profile)
    address = f"{profile.login_host}:{profile.port}"
    if "IDENTIFICATION HAS CHANGED" in stderr:
        return hostkeys.changed_key(profile, known_hosts)
    if "Host key verification failed" in stderr:
        return hostkeys.unknown_key(profile, known_hosts)
    if "Permission denied" in stderr:
        if login and profile.auth != "mfa":  # the key is the setup: retrying cannot help
            return SetupError(
                f"site {profile.name} refused the key ({last_line(stderr)}): install your "
                "public key there or name the right one in the profile's identity_file "
                "(a key with a passphrase: load it into ssh-agent first)"
            )
        if login:
            return RemoteError(
                f"site {profile.name} refused the login ({last_line(stderr)}): a wrong or "
                f"already used code? run condor_lumberjack login {profile.name} again "
                "with a fresh one"
            )
        return LoginNeeded(needs_login(profile))
    if "Connection refused" in stderr:
        return RemoteError(f"cannot connect to {address}: connection refused")
    if "timed out" in stderr:
        return RemoteError(f"cannot connect to {address}: no answer in {CONNECT_TIMEOUT} s")
    return RemoteError(f"cannot connect to {address}: {one_line(last_line(stderr))}")


def needs_login(profile: SiteProfile, expired: float | None = None) -> str:
    why = f"its login expired at {_clock(expired)}" if expired else "no login is live"
    return (
        f"site {profile.name} asks for a one-time code and {why}: "
        f"run condor_lumberjack login {profile.name}"
    )


# ---- the login of a site ---------------------------------------------------------------


@dataclass(frozen=True)
class LoginState:
    """Whether a site's login is live, and until when lumberjack uses it."""

    site: str
    live: bool
    until: float | None = None
    expired: float | None = None  # when a login that is no more ran out

    def to_json(self) -> dict[str, object]:
        return {"live": self.live, "until": _clock(self.until) if self.until else None}

    def describe(self) -> str:
        if self.live and self.until:
            return f"login live until {_clock(self.until)}"
        if self.expired:
            return f"login expired at {_clock(self.expired)}"
        return "no login"


def state(profile: SiteProfile) -> LoginState:
    """The site's login as it is now; a login past its time is closed here."""
    path = socket_path(profile)
    record = _read_record(profile)
    until = record.get("until")
    if isinstance(until, (int, float)) and until <= time.time():
        control(profile, path, "exit")
        _record_path(profile).unlink(missing_ok=True)
        return LoginState(profile.name, False, expired=until)
    if not control(profile, path, "check"):
        return LoginState(profile.name, False)
    return LoginState(profile.name, True, until if isinstance(until, (int, float)) else None)


def open_login(profile: SiteProfile, persist_s: int = DEFAULT_PERSIST_S) -> LoginState:
    """Open the site's login (closing an earlier one): the person answers once."""
    if not profile.connection_sharing:
        raise BadInput(
            f"site {profile.name} allows no connection sharing (connection_sharing = false "
            "in its profile), so no login can be kept: run condor_lumberjack sync --watch "
            "in a terminal multiplexer; it asks once and holds one connection"
        )
    path = socket_path(profile)
    close_login(profile)
    start_master(profile, path, persist_s)
    opened = time.time()
    record = {"site": profile.name, "opened": opened, "until": opened + persist_s}
    target = _record_path(profile)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(json.dumps(record))
    os.replace(partial, target)
    return LoginState(profile.name, True, record["until"])


def close_login(profile: SiteProfile) -> bool:
    """Close the site's login; whether one was live."""
    path = socket_path(profile)
    was_live = control(profile, path, "exit")
    path.unlink(missing_ok=True)
    _record_path(profile).unlink(missing_ok=True)
    return was_live


def _read_record(profile: SiteProfile) -> dict[str, object]:
    try:
        data = json.loads(_record_path(profile).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _clock(when: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(when)) if when else "-"


def site_login(profile: SiteProfile) -> tuple[dict[str, object], str]:
    """How the site is logged in to now, for `exports` and `status`: JSON and text."""
    data: dict[str, object] = {
        "auth": profile.auth,
        "connection_sharing": profile.connection_sharing,
    }
    if profile.auth == "mfa" and not profile.connection_sharing:
        return {**data, "live": False, "until": None}, "no login can be kept: use sync --watch"
    if profile.auth == "key" and not socket_path(profile).exists():
        return {**data, "live": False, "until": None}, "key: no login needed"
    now = state(profile)
    text = now.describe()
    if profile.auth == "mfa" and not now.live:
        text += f": run condor_lumberjack login {profile.name}"
    return {**data, **now.to_json()}, text
