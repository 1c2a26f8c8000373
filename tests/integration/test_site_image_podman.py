"""The site image for podman-hpc (Perlmutter's runtime), built with Debian's podman, the
engine podman-hpc wraps, by `sites image build --runtime podman-hpc` from the recipe
shipped in the package: it builds, carries the recipe it was built from, and HTCondor
25.x starts in it (condor_master brings up a collector and a schedd)."""

from __future__ import annotations

import sys
from pathlib import Path

import podman_site
import pytest

from lumberjack.ap.site_image import recipe_hash

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).with_name("condor_lumberjack")


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    reason = podman_site.why_not()
    if reason:
        pytest.skip(f"podman site image: {reason}")
    tag, answer = podman_site.ensure_image(CLI, tmp_path_factory.mktemp("podman-build"))
    if answer is not None:  # built now, not cached: what the CLI rendered and ran
        assert [Path(f).name for f in answer["files"]] == ["Containerfile", "setup.sh"]
        assert answer["command"][:2] == ["podman", "build"] and answer["built"]
    return tag


def test_the_image_carries_its_recipe(image: str) -> None:
    labels = podman_site.podman("image", "inspect", "--format", "{{json .Labels}}", image).stdout
    assert f'"org.condor-lumberjack.recipe":"{recipe_hash()}"' in labels, labels


def test_htcondor_starts_in_the_image(image: str) -> None:
    # A pool of its own on the container's loopback (no network): the master starts the
    # collector and the schedd, which then answer condor_status.
    config = {
        "DAEMON_LIST": "MASTER COLLECTOR SCHEDD",
        "CONDOR_HOST": "127.0.0.1",
        "NETWORK_INTERFACE": "127.0.0.1",
        "BIND_ALL_INTERFACES": "FALSE",
        "ENABLE_IPV6": "FALSE",
    }
    env = [arg for key, value in config.items() for arg in ("-e", f"_CONDOR_{key}={value}")]
    # Wait until both the collector's and the schedd's own ads are in (each daemon
    # publishes its ad on its own schedule), at most 30 s.
    script = (
        "condor_version | head -n1; condor_master; "
        "for i in $(seq 60); do types=$(condor_status -any -af MyType 2>/dev/null); "
        'echo "$types" | grep -qx Collector && echo "$types" | grep -qx Scheduler && break; '
        'sleep 0.5; done; echo "$types"; pgrep -x condor_master >/dev/null '
        "&& echo master-running"
    )
    out = podman_site.podman(
        "run", "--rm", "--network", "none", *env, image, "sh", "-c", script
    ).stdout.splitlines()
    assert out[0].startswith("$CondorVersion: 25."), out
    # The master started both (its own ad may come later).
    assert {"Collector", "Scheduler", "master-running"} <= set(out[1:]), out
