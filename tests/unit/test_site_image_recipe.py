"""The site image's recipe: lumberjack-site.def (built at real sites) and the testbed's
build-testbed-image.sh install the same packages, listed once in packages.txt."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMAGE_DIR = ROOT / "containers" / "site-image"
sys.path.insert(0, str(ROOT / "containers" / "testbed"))

import testbed  # noqa: E402


def packages_txt() -> list[str]:
    lines = (IMAGE_DIR / "packages.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def packages_in_def() -> list[str]:
    text = (IMAGE_DIR / "lumberjack-site.def").read_text()
    block = re.search(r"# packages: begin.*?\n(.*?)# packages: end", text, re.S)
    assert block, "lumberjack-site.def lost its '# packages: begin/end' markers"
    words = block.group(1).replace("\\", " ").split()
    assert words[:2] == ["apt-get", "install"], words
    return [word for word in words[2:] if not word.startswith("-")]


def test_def_and_packages_txt_agree() -> None:
    assert sorted(packages_in_def()) == sorted(packages_txt())
    assert "condor" in packages_txt()


def test_def_writes_no_host_names() -> None:
    # Sites build from their own configured registry/mirror: no host in the recipe.
    for name in ("lumberjack-site.def", "build-testbed-image.sh", "packages.txt"):
        text = (IMAGE_DIR / name).read_text()
        assert not re.search(r"[a-z0-9-]+\.(org|net|com|io|edu)\b", text), name
        assert "://" not in text.replace("docker://", ""), name


def test_def_bootstraps_from_a_base_image_and_checks_the_version() -> None:
    text = (IMAGE_DIR / "lumberjack-site.def").read_text()
    assert re.search(r"^Bootstrap: docker$", text, re.M)
    assert re.search(r"^From: \{\{ BASE \}\}$", text, re.M)
    assert "$CondorVersion: 25" in text


def test_image_cache_name_follows_the_recipe() -> None:
    digest = testbed.recipe_hash(testbed.SITE_IMAGE_DIR, testbed.SITE_IMAGE_RECIPE)
    assert re.fullmatch(r"[0-9a-f]{12}", digest)
    assert digest != testbed.recipe_hash()
    for name in testbed.SITE_IMAGE_RECIPE:
        assert (testbed.SITE_IMAGE_DIR / name).is_file()
