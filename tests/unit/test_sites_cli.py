"""`condor_lumberjack sites list | show | check` through click, no network."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from lumberjack.cli import cli, sites_cmd
from lumberjack.cli.request_options import request_from_options, request_options
from lumberjack.profiles.request import REQUEST_FIELDS
from lumberjack.profiles.sites import find_profile


@pytest.fixture(autouse=True)
def shipped_profiles_only(tmp_path, monkeypatch):
    monkeypatch.delenv("LUMBERJACK_SITE_PROFILES", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def run(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="condor_lumberjack")


def test_importing_sites_cmd_registers_the_group():
    assert cli.get_command(click.Context(cli), "sites") is sites_cmd.sites


def test_list_text():
    result = run("sites", "list")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["NAME", "SYSTEM", "BATCH", "QUEUES"]
    perlmutter = next(line for line in lines if line.startswith("perlmutter"))
    assert "NERSC Perlmutter" in perlmutter
    assert perlmutter.rstrip().endswith("regular-cpu* +3")
    assert any(line.startswith("theta ") and "cobalt" in line for line in lines)
    assert max(len(line) for line in lines) <= 100


def test_list_wide_names_every_queue():
    lines = run("sites", "list", "--wide").output.splitlines()
    perlmutter = next(line for line in lines if line.startswith("perlmutter"))
    assert "regular-cpu*, debug-cpu, regular-gpu, debug-gpu" in perlmutter
    assert perlmutter.rstrip().endswith("perlmutter.nersc.gov")


def test_list_json():
    result = run("sites", "list", "--json")
    assert result.exit_code == 0
    data = json.loads(result.output)["sites"]
    names = [site["name"] for site in data]
    assert "testbed" in names and "polaris" in names
    polaris = next(site for site in data if site["name"] == "polaris")
    assert polaris["batch_system"] == "pbs"
    assert polaris["default_queue"] == "debug"
    assert "preemptable" in polaris["queues"]


def test_show_text_and_json():
    result = run("sites", "show", "testbed")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("testbed: lumberjack testbed")
    assert "hpcuser@10.251.0.2:2222" in result.output
    assert "debug*" in result.output and "1-3" in result.output
    data = json.loads(run("sites", "show", "testbed", "--json").output)
    assert data["port"] == 2222
    assert data["queues"][0]["memory_per_node"] == "2GB"


def test_show_unknown_site_exits_2():
    result = run("sites", "show", "nowhere")
    assert result.exit_code == 2
    assert result.output.startswith("error: unknown site 'nowhere'; known sites: anvil")
    result = run("sites", "show", "nowhere", "--json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["ok"] is False


def test_check_prints_the_report():
    result = run("sites", "check", "testbed", "--nodes", "3", "--walltime", "45m")
    assert result.exit_code == 0, result.output
    assert "nodes        3" in result.output
    assert "(from --nodes)" in result.output
    assert "walltime     00:45:00" in result.output
    assert "(profile default; change with --cores)" in result.output


def test_check_json():
    result = run(
        "sites", "check", "perlmutter", "--queue", "debug-cpu", "--nodes", "16",
        "--pilots", "2", "--allocation", "m1234", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ok"] is True
    assert (data["nodes"], data["pilots"], data["nodes_per_pilot"]) == (16, 2, 8)
    assert data["walltime"] == "00:30:00"


def test_check_names_the_site_account_other_owners_share():
    for site in ("testbed", "testbed-nocontainer"):  # two names, one account
        data = json.loads(run("sites", "check", site, "--json").output)
        assert data["site_account"] == "hpcuser@10.251.0.2"
    result = run("sites", "check", "testbed-nocontainer")
    assert "other owners: on site account hpcuser@10.251.0.2, runtime none" in result.output


def test_check_breaking_a_limit_exits_2_with_one_line():
    result = run("sites", "check", "perlmutter", "--queue", "debug-cpu", "--nodes", "12")
    assert result.exit_code == 2
    assert result.output == (
        'error: --nodes 12 exceeds queue "debug-cpu" of site "perlmutter" (max 8 nodes); '
        "use --nodes 8, --pilots 2 or --queue regular-cpu (24 node-hours)\n"
    )
    result = run("sites", "check", "testbed", "--cores", "9", "--json")
    assert result.exit_code == 2
    assert json.loads(result.stdout) == {
        "ok": False,
        "error": '--cores 9 exceeds queue "debug" of site "testbed" (max 2 cores per node); '
        "use --cores 2",
    }


@pytest.mark.parametrize("args", [["sites"], ["sites", "list"], ["sites", "show"],
                                  ["sites", "check"]])  # fmt: skip
def test_every_command_has_help_with_an_example(args):
    result = run(*args, "--help")
    assert result.exit_code == 0
    assert "Example" in result.output
    assert "condor_lumberjack sites" in result.output


def test_check_help_lists_the_request_flags():
    output = run("sites", "check", "--help").output
    for name in REQUEST_FIELDS:
        assert f"--{name.replace('_', '-')}" in output


def test_request_options_are_reusable():
    seen = {}

    @click.command()
    @click.option("--site")
    @request_options
    def export(site, **flags):
        seen["request"] = request_from_options(find_profile(site), **flags, ignored="x")

    result = CliRunner().invoke(export, ["--site", "testbed", "--nodes", "2", "--memory", "1GB"])
    assert result.exit_code == 0, result.output
    request = seen["request"]
    assert (request.nodes, request.memory_per_node_mb) == (2, 1024)
