"""The seam between lumberjack and an SSH implementation: a carrier runs one command at
the site with its stdin and stdout as streams.

Everything else (commands, the site agent, transfers, path expansion) is built on
`Carrier.exec` in `SiteConnection`, so a carrier is all a new way of reaching a site
needs: `FabricCarrier` (paramiko, keys) is one; `OpenSshCarrier` (one MFA login shared
by `ssh -S socket` processes) is another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, Protocol

#: `feed(send)` writes a command's stdin, chunk by chunk; stdin is closed after it.
Feed = Callable[[Callable[[bytes], Any]], None]
#: `consume(stream)` reads a command's stdout as it comes.
Consume = Callable[[IO[bytes]], None]


@dataclass(frozen=True)
class RunResult:
    command: str
    stdout: str
    stderr: str
    exited: int

    @property
    def ok(self) -> bool:
        return self.exited == 0


class LinkLost(Exception):
    """The connection went away while a command ran (its outcome is unknown)."""


class Carrier(Protocol):
    """One connection to a site's login node, opened once per lumberjack command."""

    #: "host:port", for messages.
    address: str

    def open(self) -> None:
        """Connect (and log in) if not connected; RemoteError or BadInput, one line, if not."""

    def close(self) -> None:
        """Disconnect; a command running then fails with LinkLost."""

    def exec(
        self,
        command: str,
        *,
        feed: Feed | None = None,
        consume: Consume | None = None,
        timeout: float | None = None,
    ) -> RunResult:
        """Run `command` through the site's login shell; its exit status and stderr.

        stdout is collected into the result unless `consume` reads it. An exception
        raised by `feed` ends the command (its stdin is cut, not closed) and is raised,
        as is one raised by `consume`. LinkLost when the connection drops; RemoteError
        when the site does not answer within `timeout` seconds.
        """
        ...


class Reach(Protocol):
    """What a transfer needs of a connection to a site (SiteConnection is one): the
    carrier to run the helper on, an address for messages, and the site's expansion of a
    path. Here, below both, so the connection and the transfer driver need not know each
    other."""

    carrier: Carrier
    address: str

    def expand(self, path: str) -> str: ...
