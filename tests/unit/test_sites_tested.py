"""What `sites list` and `sites show` say about a profile beyond its file's facts: how far
lumberjack has run a site of its kind (`tested`, with the reason), and that the project's
emulated site appears only where the testbed is configured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lumberjack.cli import cli
from lumberjack.profiles.messages import display_path
from lumberjack.profiles.sites import find_profile, list_profiles, shipped_profile_dir

SHIPPED = sorted(path.stem for path in shipped_profile_dir().glob("*.toml"))
TESTBED = [name for name in SHIPPED if name.startswith("testbed")]


@pytest.fixture(autouse=True)
def shipped_only(tmp_path, monkeypatch):
    monkeypatch.delenv("LUMBERJACK_SITE_PROFILES", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_every_shipped_profile_says_how_far_it_ran_and_why() -> None:
    said = {
        p.name: (p.batch_system, p.container.runtime, {q.arch for q in p.queues}, p.tested)
        for p in list_profiles()
    }
    assert sorted(said) == SHIPPED
    for name, (batch, runtime, arches, tested) in said.items():
        # The testbed runs Slurm with Apptainer (and with no container) on x86_64: that ran
        # end to end; PBS, Cobalt, singularity, podman-hpc, CSCS's engine and aarch64 were
        # only rendered. aarch64 ran under emulation, without the nested job container
        # (runtime apptainer-emulated): a real aarch64 Apptainer site was still only rendered.
        native = runtime in ("apptainer", "none") and arches == {"X86_64"}
        ran = batch == "slurm" and (native or runtime == "apptainer-emulated")
        assert tested == ("end-to-end on the testbed" if ran else "rendered only"), name
        assert find_profile(name).tested_note, name


def test_list_and_show_give_the_tested_status() -> None:
    code, text = run("sites", "list")
    assert code == 0
    header, *rows = text.splitlines()
    assert header.split()[:5] == ["NAME", "SYSTEM", "BATCH", "TESTED", "QUEUES"]
    by_name = {row.split()[0]: row for row in rows}
    assert "  rendered  " in by_name["perlmutter"] and "  rendered  " in by_name["polaris"]
    assert "  end-to-end  " in by_name["stampede3"]
    assert max(len(row) for row in text.splitlines()) <= 100
    code, answer = run("sites", "list", "--json")
    tested = {site["name"]: site["tested"] for site in json.loads(answer)["sites"]}
    assert tested["perlmutter"] == "rendered only"
    code, text = run("sites", "show", "perlmutter")
    (line,) = [line for line in text.splitlines() if line.strip().startswith("tested")]
    assert "rendered only: " in line and "podman-hpc" in line
    shown = json.loads(run("sites", "show", "aurora", "--json")[1])
    assert (shown["tested"], "PBS" in shown["tested_note"]) == ("rendered only", True)


def test_the_testbed_profiles_only_where_the_testbed_is(monkeypatch) -> None:
    monkeypatch.setenv("LUMBERJACK_TESTBED_DIR", "/srv/testbed")
    assert set(TESTBED) <= {p.name for p in list_profiles()}
    monkeypatch.delenv("LUMBERJACK_TESTBED_DIR")
    names = [p.name for p in list_profiles()]
    assert "perlmutter" in names and not [n for n in names if n.startswith("testbed")]
    code, text = run("sites", "list", "--wide")
    assert code == 0 and "testbed" not in text and "10.251." not in text
    code, text = run("sites", "show", "testbed", "--json")
    assert code == 2
    assert (
        "testbed is the project's emulated site, known where LUMBERJACK_TESTBED_DIR is set"
        in (json.loads(text)["error"])
    )


def test_a_profile_of_your_own_named_testbed_stays(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("LUMBERJACK_TESTBED_DIR", raising=False)
    own = tmp_path / "mine"
    own.mkdir()
    text = (shipped_profile_dir() / "testbed.toml").read_text()
    (own / "testbed-mine.toml").write_text(
        text.replace('name = "testbed"', 'name = "testbed-mine"').replace(
            "${LUMBERJACK_TESTBED_DIR}", "/srv/tb"
        )
    )
    monkeypatch.setenv("LUMBERJACK_SITE_PROFILES", str(own))
    assert [p.name for p in list_profiles() if p.name.startswith("testbed")] == ["testbed-mine"]
    assert find_profile("testbed-mine").tested == "end-to-end on the testbed"


def test_a_bad_tested_value_is_one_line(tmp_path: Path, monkeypatch) -> None:
    own = tmp_path / "mine"
    own.mkdir()
    text = (shipped_profile_dir() / "delta.toml").read_text()
    (own / "delta.toml").write_text(text.replace('tested = "end-to-end on the testbed"',
                                                 'tested = "yes"'))  # fmt: skip
    monkeypatch.setenv("LUMBERJACK_SITE_PROFILES", str(own))
    code, text = run("sites", "show", "delta")
    assert code == 7  # a profile that does not load is a setup mistake
    shown = display_path(own / "delta.toml")
    assert text.strip().splitlines()[-1] == (
        f'error: {shown}: [site].tested "yes" is not one of the choices; write '
        '"end-to-end on the testbed" or "rendered only" or "untested"'
    )
