"""The docker tier's shared pieces: the compose project's file, its running pools, and
the machine's addresses (no private-range address may ever appear)."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import testbed

ROOT = Path(__file__).resolve().parents[2]
MINICONDOR = ROOT / "containers" / "minicondor"
COMPOSE_FILE = MINICONDOR / "compose.yaml"
MINI_SPOOL = "/var/lib/condor/spool"  # the MiniCondor's SPOOL inside its container


def addresses() -> set[str]:
    """Every interface address of this machine, as `ip -o addr` shows them."""
    out = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    found = set()
    for line in out.splitlines():
        fields = line.split()
        if fields[2] in ("inet", "inet6"):
            found.add(f"{fields[1]} {fields[3]}")
    return found


def testbed_interfaces() -> set[str]:
    """The testbed's own veth pair: its emulated site may come up while this tier runs."""
    testbed.site()  # loads containers/testbed/site.py
    site = sys.modules["lumberjack_testbed_site"]
    return {site.VETH_HOST, site.VETH_SITE}


def new_private(before: set[str], now: set[str]) -> set[str]:
    """Addresses in a private (or link-local) range that were not there before, on any
    interface but the testbed's."""
    ours = testbed_interfaces()
    return {
        a
        for a in now - before
        if a.split()[0] not in ours and ipaddress.ip_interface(a.split()[1]).is_private
    }


@dataclass
class Tier:
    image: str
    work: Path  # bind-mounted into the access point at the same path
    mini_spool: Path  # bind-mounted into the MiniCondor as its SPOOL
    addresses_before: set[str]


class Pools:
    """The running compose project: run commands in its containers, as pytest-docker
    runs compose itself."""

    def __init__(self, command: str, compose_file: str, project: str) -> None:
        self.base = [*command.split(), "-f", compose_file, "-p", project]

    def compose(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([*self.base, *args], capture_output=True, text=True)
        if check and result.returncode != 0:
            raise AssertionError(f"docker compose {' '.join(args)} failed: {result.stderr}")
        return result

    def exec(self, service: str, *argv: str, user: str = "root", workdir: str = "/") -> str:
        return self.compose("exec", "-T", "-u", user, "-w", workdir, service, *argv).stdout
