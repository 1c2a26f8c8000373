"""The docker tier's network rule, read from its files: every compose service uses the
host's network (daemons on loopback, ports of their own) or none; never a bridge."""

from __future__ import annotations

from pathlib import Path

import pytest
import testbed
import yaml

MINICONDOR = Path(__file__).resolve().parents[2] / "containers" / "minicondor"
ISOLATED = {"host", "none"}


def load_compose(text: str) -> dict:
    return yaml.safe_load(text)


def network_offences(compose: dict) -> list[str]:
    """Why each service (or the file) could give this machine a bridge; [] when none."""
    found = [] if "networks" not in compose else ["the file declares networks"]
    for name, service in compose["services"].items():
        if service.get("network_mode") not in ISOLATED:
            found.append(f"{name}: network_mode {service.get('network_mode')!r}")
        for key in ("networks", "ports"):
            if key in service:
                found.append(f"{name}: has {key}")
    return found


def condor_config(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs if not key.startswith("#")}


def test_every_service_uses_the_host_network_or_none() -> None:
    compose = load_compose((MINICONDOR / "compose.yaml").read_text())
    assert set(compose["services"]) == {"ap", "mini"}
    assert network_offences(compose) == []


@pytest.mark.parametrize(
    "service",
    [
        "image: x",  # no network_mode: compose's default bridge
        "image: x\n    network_mode: bridge",
        "image: x\n    network_mode: host\n    networks: [default]",
    ],
)
def test_the_rule_catches_a_service_that_would_get_a_bridge(service: str) -> None:
    compose = load_compose(f"services:\n  ok:\n    network_mode: none\n  bad:\n    {service}\n")
    offences = network_offences(compose)
    assert offences and all(o.startswith("bad:") for o in offences)


def test_daemons_listen_on_loopback_only() -> None:
    config = condor_config(MINICONDOR / "lumberjack.conf")
    assert config["NETWORK_INTERFACE"] == "127.0.0.1"
    assert config["BIND_ALL_INTERFACES"] == "FALSE"
    assert config["ENABLE_IPV6"] == "FALSE"
    assert config["USE_SHARED_PORT"] == "TRUE"
    assert config["SHARED_PORT_PORT"] == "$(LJ_PORT)"
    assert config["COLLECTOR_HOST"] == "127.0.0.1:$(LJ_PORT)"


def test_each_pool_has_a_shared_port_of_its_own() -> None:
    compose = load_compose((MINICONDOR / "compose.yaml").read_text())
    ports = [int(s["environment"]["_CONDOR_LJ_PORT"]) for s in compose["services"].values()]
    taken = {9618, testbed.ACCESS_POINT.port, testbed.remote_pool(Path("/x")).port}
    taken.add(testbed.site().port)
    assert len(set(ports)) == len(ports)
    assert not set(ports) & taken
