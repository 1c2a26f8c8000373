"""Moving commands and files between the access point and a site, over SSH.

- `connection`: `SiteConnection`, what a lumberjack command does at a site (run a
  command, expand a path, write a file, upload, download), over one carrier;
- `carrier`: the seam to an SSH implementation (`Carrier.exec`: one command, stdin and
  stdout as streams); `fabric_carrier` is the one for sites that take a key,
  `openssh_carrier` the one for sites that ask for a one-time code;
- `login`: OpenSSH master connections a person opens once (`condor_lumberjack login`);
- `hostkeys`: pinned known_hosts, never auto-accepted, one-line refusals with the fix;
- `transfer`: the transfer driver (framed streams, resume, sha256 checks, refusals),
  reporting bytes to a `Progress`; `states`: listings and plans (pure);
- `helper`: the command line that runs lumberjack.site.transfer_helper at the site.
"""

from lumberjack.transport.carrier import Carrier, LinkLost, RunResult
from lumberjack.transport.connection import SiteConnection, carrier_for
from lumberjack.transport.helper import helper_command
from lumberjack.transport.states import (
    FileState,
    Step,
    TransferReport,
    check_download_listing,
    local_states,
    parse_listing,
    plan,
    verify_states,
)
from lumberjack.transport.transfer import Progress

__all__ = [
    "Carrier",
    "FileState",
    "LinkLost",
    "Progress",
    "RunResult",
    "SiteConnection",
    "Step",
    "TransferReport",
    "carrier_for",
    "check_download_listing",
    "helper_command",
    "local_states",
    "parse_listing",
    "plan",
    "verify_states",
]
