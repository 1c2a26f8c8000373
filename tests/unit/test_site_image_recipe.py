"""The site image's recipe (lumberjack/ap/site-image/): one package list and one setup
script, rendered by `sites image build` as an Apptainer definition file and as a
Containerfile for podman-hpc, and read by the testbed's build; the cached testbed image
is named by the hash of what that build reads."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lumberjack.ap import site_image
from lumberjack.cli import cli

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "containers" / "testbed"))

import testbed  # noqa: E402


def render(runtime: str, out: Path, *args: str) -> dict:
    result = CliRunner().invoke(
        cli, ["sites", "image", "build", "--runtime", runtime, "--output", str(out),
              "--dry-run", "--json", *args],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_both_recipes_install_the_one_package_list(tmp_path: Path) -> None:
    packages = site_image.packages()
    assert "condor" in packages and "apptainer" in packages
    definition = Path(render("apptainer", tmp_path / "a")["files"][0]).read_text()
    (post,) = re.findall(r"^    set -- (.*)$", definition, re.M)
    assert post.split() == packages
    containerfile = Path(render("podman-hpc", tmp_path / "p")["files"][0]).read_text()
    (run,) = re.findall(r"^RUN sh /tmp/lumberjack-setup.sh (.*?) &&", containerfile, re.M)
    assert run.split() == packages


def test_both_recipes_run_the_one_setup(tmp_path: Path) -> None:
    setup = (site_image.RECIPE_DIR / "setup.sh").read_text().splitlines()[1:]
    definition = Path(render("apptainer", tmp_path / "a")["files"][0]).read_text()
    post = definition.split("%post\n", 1)[1].split("\n%test", 1)[0].splitlines()[1:]
    assert [line.strip() for line in post if line.strip()] == [
        line.strip() for line in setup if line.strip()
    ]
    answer = render("podman-hpc", tmp_path / "p")
    copied = Path(answer["files"][1])
    assert copied.name == "setup.sh"
    assert copied.read_bytes() == (site_image.RECIPE_DIR / "setup.sh").read_bytes()


def test_the_base_and_recipe_hash_are_written_in(tmp_path: Path) -> None:
    answer = render("podman-hpc", tmp_path / "p", "--base", "localhost/sid:1")
    text = Path(answer["files"][0]).read_text()
    assert "ARG BASE=localhost/sid:1\nFROM ${BASE}\n" in text
    assert f"org.condor-lumberjack.recipe={site_image.recipe_hash()}" in text
    assert answer["command"][1:] == ["build", "--build-arg", "BASE=localhost/sid:1", "-t",
                                     "lumberjack-site:latest", str(tmp_path / "p")]  # fmt: skip
    definition = Path(render("apptainer", tmp_path / "a")["files"][0]).read_text()
    assert re.search(r"^Bootstrap: docker\nFrom: \{\{ BASE \}\}$", definition, re.M)
    assert f"    BASE={site_image.DEFAULT_BASE}\n" in definition
    assert "$CondorVersion: 25" in definition  # the build fails on another HTCondor


def test_the_recipe_writes_no_host_names() -> None:
    # Sites build from their own configured registry/mirror: no host in the recipe.
    files = [*site_image.RECIPE_DIR.iterdir(), ROOT / "containers/site-image/podman-base.sh",
             ROOT / "containers/site-image/build-testbed-image.sh"]  # fmt: skip
    for path in files:
        text = path.read_text()
        assert not re.search(r"[a-z0-9-]+\.(org|net|com|io|edu|gov)\b", text), path
        assert "://" not in text, path


def test_the_testbed_builds_from_the_package_recipe() -> None:
    script = (ROOT / "containers/site-image/build-testbed-image.sh").read_text()
    assert "lumberjack/ap/site-image" in script and "lumberjack-setup.sh $packages" in script
    for name in testbed.SITE_IMAGE_RECIPE:
        assert (ROOT / name).is_file()
    assert {"lumberjack/ap/site-image/packages.txt", "lumberjack/ap/site-image/setup.sh"} <= set(
        testbed.SITE_IMAGE_RECIPE
    )
    digest = testbed.recipe_hash(testbed.REPO, testbed.SITE_IMAGE_RECIPE)
    assert re.fullmatch(r"[0-9a-f]{12}", digest) and digest != testbed.recipe_hash()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["testbed-nocontainer"], "runtime none needs no site image"),
        ([], "name a SITE or give --runtime"),
        (["perlmutter", "--runtime", "apptainer"], "name a SITE or give --runtime"),
        (["nosuchsite"], "unknown site 'nosuchsite'"),
        (["--runtime", "apptainer", "--engine", "no-such-engine"], "no-such-engine is not on PATH"),
    ],
)
def test_bad_input_is_one_line_and_builds_nothing(tmp_path: Path, args, message) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["sites", "image", "build", *args, "--output", str(out),
                                      "--json"])  # fmt: skip
    assert result.exit_code == 2, result.output
    answer = json.loads(result.output)
    assert answer["ok"] is False and message in answer["error"]
    assert not out.exists()


def test_a_site_gets_its_runtime_and_the_step_that_places_the_image(tmp_path: Path) -> None:
    polaris = render_site("polaris", tmp_path / "pol")
    assert polaris["runtime"] == "apptainer" and polaris["target"].endswith(".sif")
    (place,) = polaris["place"]
    assert place.startswith("ssh polaris.alcf.anl.gov ") and '"$HOME/lumberjack/image/' in place
    perlmutter = render_site("perlmutter", tmp_path / "perl")
    assert perlmutter["runtime"] == "podman-hpc"
    assert perlmutter["target"] == "lumberjack-site:latest"  # the profile's image
    assert any("podman-hpc migrate lumberjack-site:latest" in s for s in perlmutter["place"])


def render_site(site: str, out: Path) -> dict:
    result = CliRunner().invoke(cli, ["sites", "image", "build", site, "--output", str(out),
                                      "--dry-run", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize(
    ("machine", "cross_apptainer", "cross_podman"),
    [
        ("x86_64", ["--arch", "arm64"], ["--platform", "linux/arm64"]),  # emulated build
        ("aarch64", [], []),  # on the site's own architecture: a plain build
    ],
)
def test_an_aarch64_site_gets_an_aarch64_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, machine, cross_apptainer, cross_podman
) -> None:
    monkeypatch.setattr(site_image.platform, "machine", lambda: machine)
    vista = render_site("vista", tmp_path / "vista")  # every queue Grace (aarch64)
    assert vista["arch"] == "aarch64" and vista["emulated"] is (machine == "x86_64")
    command = vista["command"]
    assert command[:2] == ["apptainer", "build"]
    assert command[2 : 2 + len(cross_apptainer)] == cross_apptainer
    # The SIF is named as the profile's [container] image, and the step places it there.
    assert vista["target"].endswith("/lumberjack-site-aarch64.sif")
    (place,) = vista["place"]
    assert '"$WORK/lumberjack/image/lumberjack-site-aarch64.sif"' in place
    podman = CliRunner().invoke(cli, ["sites", "image", "build", "--runtime", "podman-hpc",
                                      "--arch", "aarch64", "--output", str(tmp_path / "p"),
                                      "--dry-run", "--json"])  # fmt: skip
    assert podman.exit_code == 0, podman.output
    assert json.loads(podman.output)["command"][2 : 2 + len(cross_podman)] == cross_podman
    # An x86_64 site's build on this machine stays as it was: no architecture flag.
    stampede = render_site("stampede3", tmp_path / "s3")
    assert stampede["arch"] == "X86_64" and stampede["target"].endswith("/lumberjack-site.sif")
    assert ("--arch" in stampede["command"]) is (machine == "aarch64")


def test_the_text_says_when_the_build_is_emulated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(site_image.platform, "machine", lambda: "x86_64")
    result = CliRunner().invoke(cli, ["sites", "image", "build", "vista", "--output",
                                      str(tmp_path / "v"), "--dry-run"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "recipe for apptainer (aarch64)" in result.output
    assert "apptainer build --arch arm64 " in result.output
    assert "aarch64 on this X86_64 machine: the setup runs under emulation" in result.output


def mixed_profile() -> str:
    """The testbed's profile as a site whose gpu queue is aarch64 (two architectures)."""
    text = (site_image.RECIPE_DIR.parent.parent / "profiles/site-profiles/testbed.toml").read_text()
    text = text.replace('name = "testbed"', 'name = "mixed"', 1)
    return text.replace('name = "gpu"', 'name = "gpu"\narch = "aarch64"', 1)


@pytest.mark.parametrize(
    ("site", "arch", "message"),
    [
        ("stampede3", "aarch64", "site stampede3 has no aarch64 queue (its queues are X86_64)"),
        ("mixed", None, "more than one architecture (X86_64: debug; aarch64: gpu); name one"),
    ],
)
def test_an_architecture_the_site_lacks_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, site, arch, message
) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "mixed.toml").write_text(mixed_profile())
    monkeypatch.setenv("LUMBERJACK_SITE_PROFILES", str(profiles))
    out = tmp_path / "out"
    args = [site, *(["--arch", arch] if arch else []), "--output", str(out), "--json"]
    result = CliRunner().invoke(cli, ["sites", "image", "build", *args])
    assert result.exit_code == 2, result.output
    assert message in json.loads(result.output)["error"]
    assert not out.exists()
    # The mixed site builds either architecture when told which.
    chosen = CliRunner().invoke(cli, ["sites", "image", "build", "mixed", "--arch", "aarch64",
                                      "--output", str(out), "--dry-run", "--json"])  # fmt: skip
    assert chosen.exit_code == 0, chosen.output
    assert json.loads(chosen.output)["target"].endswith("lumberjack-site-aarch64.sif")
