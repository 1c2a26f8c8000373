"""The site image (containers/site-image/) at the emulated site: the testbed builds it
without registry pulls, installs it where the testbed profile's [container] image
points, and hpcuser runs HTCondor 25.x from it on the login node and on every node."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import testbed
from fabric import Connection
from journey import site_connection as connect
from journey import site_sh as sh

from lumberjack.profiles.sites import find_profile

pytestmark = pytest.mark.integration

NODES = ["c1", "c2", "c3"]


@pytest.fixture
def conn(site):
    with connect(site) as connection:
        yield connection


@pytest.fixture(scope="module")
def image(site) -> str:
    """The image's path at the site: the testbed profile's [container] image."""
    path = find_profile("testbed").container.image
    # site.home is bind-mounted at /home inside the site.
    assert site.image == site.home / Path(path).relative_to("/home")
    assert site.image.stat().st_uid == 4343
    return path


def test_image_matches_the_cached_build(site, image: str) -> None:
    built = testbed.ensure_site_image(testbed.rootfs_path())
    assert site.image.stat().st_size == built.stat().st_size
    versions = testbed.site_image_versions(built)
    assert versions["condor"].startswith(testbed.TESTED_VERSIONS["condor"]), versions


def test_condor_version_in_the_image(conn: Connection, image: str) -> None:
    out = sh(conn, f"apptainer -s exec {shlex.quote(image)} condor_version").stdout
    assert out.startswith("$CondorVersion: 25."), out


def test_image_is_mounted_with_squashfuse(conn: Connection, image: str) -> None:
    # Without a usable /dev/fuse Apptainer unpacks the SIF to a temporary sandbox on
    # every start (about 1.5 s here instead of 0.3 s).
    debug = sh(conn, f"apptainer -d exec {shlex.quote(image)} true 2>&1").stdout
    assert "Executing /usr/bin/squashfuse_ll" in debug, debug[-3000:]
    assert "temporary sandbox" not in debug


def test_image_runs_on_every_node(conn: Connection, image: str) -> None:
    inner = 'echo "$SLURMD_NODENAME $(condor_config_val -version | head -n1)"'
    command = (
        f"timeout 60 srun -N{len(NODES)} apptainer -s exec {shlex.quote(image)} "
        f"sh -c {shlex.quote(inner)}"
    )
    lines = sh(conn, command).stdout.splitlines()
    by_node = dict(line.split(" ", 1) for line in lines)
    assert sorted(by_node) == NODES, lines
    for version in by_node.values():
        assert version.startswith("$CondorVersion: 25."), lines


def test_the_printed_step_places_the_image(site, tmp_path: Path, conn: Connection) -> None:
    """`sites image build SITE` prints the command that puts the image at the profile's
    [container] image: run as printed (ssh to the emulated site), it lands there whole and
    runs. A copy of the testbed profile whose image path is a directory of its own."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    remote = "/home/hpcuser/lumberjack/place-test/lumberjack-site.sif"
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    text = (find_profile("testbed").path).read_text()
    (profiles / "placetest.toml").write_text(
        text.replace('name = "testbed"', 'name = "placetest"').replace(
            'image = "/home/hpcuser/lumberjack/image/lumberjack-site.sif"', f'image = "{remote}"'
        )
    )
    env = {**os.environ, "LUMBERJACK_SITE_PROFILES": str(profiles)}
    answer = json.loads(
        subprocess.run(
            [sys.executable, "-m", "lumberjack", "sites", "image", "build", "placetest",
             "--output", str(tmp_path / "image"), "--dry-run", "--json"],
            env=env, capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    shutil.copy(testbed.ensure_site_image(testbed.rootfs_path()), answer["target"])  # "built"
    (step,) = answer["place"]
    try:
        subprocess.run(["bash", "-c", step], check=True, timeout=120)
        placed = site.home / Path(remote).relative_to("/home")
        assert placed.stat().st_size == Path(answer["target"]).stat().st_size
        assert not placed.with_name(placed.name + ".partial").exists()
        out = sh(conn, f"apptainer -s exec {shlex.quote(remote)} condor_version").stdout
        assert out.startswith("$CondorVersion: 25."), out
    finally:
        sh(conn, f"rm -rf {shlex.quote(str(Path(remote).parent))}")
