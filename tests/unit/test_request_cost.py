"""Cost before commitment: node-hours and warnings in the request report, queue hints
checked against the whole request, the GPU spelling a profile names, and the pilots'
batch scripts shown at home with the site agent's own code (`--show-script`)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import lumberjack.cli.exports_cmd  # noqa: F401  (registers the commands on `cli`)
import lumberjack.cli.lease_cmd  # noqa: F401
import lumberjack.cli.sites_cmd  # noqa: F401
from lumberjack.cli import cli
from lumberjack.core.contract import ExportLayout, LaunchPlan, decode, encode
from lumberjack.errors import BadInput
from lumberjack.profiles.request import build_request, report_dict, report_lines
from lumberjack.profiles.sites import find_profile
from lumberjack.site.batch import get_batch_system
from lumberjack.site.remote_pool import pilot_script
from lumberjack.state import plans


@pytest.fixture(autouse=True)
def shipped_profiles_only(tmp_path, monkeypatch):
    monkeypatch.delenv("LUMBERJACK_SITE_PROFILES", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LUMBERJACK_STATE_DIR", str(tmp_path / "state"))


def run(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="condor_lumberjack")


def refusal(site: str, **flags) -> str:
    with pytest.raises(BadInput) as info:
        build_request(find_profile(site), **flags)
    assert info.value.exit_code == 2 and "\n" not in str(info.value)
    return str(info.value)


def line(lines: list[str], key: str) -> str:
    return next(text for text in lines if text.startswith(f"{key:<12} "))


# ---- hints: the whole request, with its cost ------------------------------------------


def test_polaris_walltime_hint_names_queues_that_take_it_with_their_cost():
    # Issue 35: the hint was prod-small, whose minimum made 1 node 10, silently.
    assert refusal("polaris", walltime="3h") == (
        '--walltime 03:00:00 exceeds queue "debug" of site "polaris" (max 01:00:00); '
        "use --walltime 01:00:00, --queue preemptable (3 node-hours) or "
        "--queue capacity (3 node-hours)"
    )


def test_following_a_queue_with_a_minimum_is_a_raise_named_with_its_cost():
    polaris = find_profile("polaris")
    request = build_request(polaris, walltime="3h", queue="prod-small", allocation="p")
    assert request.nodes == 10
    lines = report_lines(request, polaris)
    assert "profile default 1, raised to queue prod-small's minimum" in line(lines, "nodes")
    assert "cut" not in line(lines, "nodes")
    assert line(lines, "cost").split("(")[0].split() == ["cost", "at", "most", "30", "node-hours"]
    assert line(lines, "warning").split(None, 1)[1] == (
        "nodes raised from 1 to 10, queue prod-small's minimum: 30 node-hours instead of "
        "3 node-hours; ask for --nodes 10 to accept it, or use a queue without the minimum"
    )
    data = report_dict(request, polaris)
    assert (data["node_hours"], data["charged_hours"], data["charge_factor"]) == (30, 30, None)
    assert data["warnings"] == [line(lines, "warning").split(None, 1)[1]]
    # asked for by name, the same nodes are no raise
    named = build_request(polaris, nodes=10, walltime="3h", queue="prod-small", allocation="p")
    assert report_dict(named, polaris)["warnings"] == []


def test_a_hint_that_raises_the_nodes_says_so(tmp_path, monkeypatch):
    # Polaris without its cheap long queues: only prod-small takes 3 hours.
    text = find_profile("polaris").path.read_text()
    start, end = text.index('[[queues]]\nname = "preemptable"'), text.index("\n[batch]\n")
    kept = (text[:start] + text[end:]).replace('name = "polaris"', 'name = "polaris-tiers"')
    (tmp_path / "polaris-tiers.toml").write_text(kept)
    monkeypatch.setenv("LUMBERJACK_SITE_PROFILES", str(tmp_path))
    assert refusal("polaris-tiers", walltime="3h") == (
        '--walltime 03:00:00 exceeds queue "debug" of site "polaris-tiers" (max 01:00:00); '
        "use --walltime 01:00:00, --queue prod-small (raises the nodes from 1 to 10: "
        "30 node-hours) or --queue prod-medium (raises the nodes from 1 to 25: 75 node-hours)"
    )


def test_a_gpu_request_is_never_pointed_at_a_queue_without_gpus():
    # Issue 35: this suggested regular-cpu, which has no GPUs.
    assert refusal("perlmutter", queue="debug-gpu", gpus=1, walltime="1h") == (
        '--walltime 01:00:00 exceeds queue "debug-gpu" of site "perlmutter" (max 00:30:00); '
        "use --walltime 00:30:00 or --queue regular-gpu (1 node-hour)"
    )


def test_a_cpu_request_goes_to_a_gpu_queue_only_when_nothing_else_takes_it():
    hint = refusal("perlmutter", queue="debug-cpu", nodes=12)
    assert "--queue regular-cpu (24 node-hours)" in hint and "gpu" not in hint
    assert refusal("testbed", cores=3).endswith("use --cores 2 or --queue gpu (0.5 node-hours)")


def test_no_hint_when_no_queue_takes_the_whole_request():
    # 20 nodes for 12 h: the queues long enough have too few nodes or a higher minimum
    assert refusal("polaris", walltime="12h", nodes=20).endswith("use --nodes 2 or --pilots 10")


# ---- cost lines and warnings -----------------------------------------------------------


def test_a_partial_node_on_a_whole_node_queue_is_warned_about():
    perlmutter = find_profile("perlmutter")
    request = build_request(perlmutter, cores=4)
    warnings = report_dict(request, perlmutter)["warnings"]
    assert warnings == [
        "--cores 4 on queue regular-cpu, which hands out whole nodes: each node is charged "
        "whole (128 cores) and the pilots use only 4; leave out --cores to use the whole node"
    ]
    gpus = report_dict(build_request(perlmutter, queue="regular-gpu", gpus=1), perlmutter)
    assert gpus["warnings"][0].startswith("--gpus 1 on queue regular-gpu")
    # the whole node, or a queue that shares nodes: nothing to warn about
    assert report_dict(build_request(perlmutter), perlmutter)["warnings"] == []
    testbed = find_profile("testbed")
    assert report_dict(build_request(testbed, cores=1), testbed)["warnings"] == []


def test_a_queue_charge_factor_multiplies_the_node_hours():
    stampede3 = find_profile("stampede3")
    request = build_request(stampede3, queue="h100", nodes=2, walltime="90m")
    data = report_dict(request, stampede3)
    assert (data["node_hours"], data["charge_factor"], data["charged_hours"]) == (3, 4, 12)
    cost = line(report_lines(request, stampede3), "cost")
    assert "at most 3 node-hours x 4 = 12 charged" in cost
    assert "x the queue's charge_factor" in cost


def test_sites_check_cli_cost_warning_and_exit_codes():
    ok = run("sites", "check", "perlmutter", "--cores", "4", "--json")
    assert ok.exit_code == 0, ok.output
    answer = json.loads(ok.output)
    assert (answer["node_hours"], answer["charged_hours"]) == (2, 2)
    assert len(answer["warnings"]) == 1 and answer["allocation"] is None
    text = run("sites", "check", "perlmutter", "--cores", "4")
    assert text.exit_code == 0
    assert "\nwarning      --cores 4 on queue regular-cpu" in text.output
    refused = run("sites", "check", "polaris", "--walltime", "3h", "--json")
    assert refused.exit_code == 2
    assert json.loads(refused.output)["ok"] is False


# ---- the GPU spelling ------------------------------------------------------------------


def scripts(site: str, **flags) -> list[dict[str, str]]:
    profile = find_profile(site)
    return plans.pilot_scripts(build_request(profile, **flags), profile, "/sc/lj/calib")


def test_stampede3_gpu_pilots_name_no_gpu_option():
    [shown] = scripts("stampede3", queue="pvc")
    assert "#SBATCH --partition=pvc" in shown["script"]
    for refused in ("--gpus-per-node", "--gres", "--gpus-per-task", "#SBATCH --mem"):
        assert refused not in shown["script"]


def test_gpu_request_spellings(tmp_path, monkeypatch):
    text = find_profile("testbed").path.read_text()
    for spelling, expected in (("gres", "--gres=gpu:1"), ("gpus-per-node", "--gpus-per-node=1")):
        (tmp_path / "t.toml").write_text(
            text.replace('name = "testbed"', 'name = "t"').replace(
                "\n[batch]\n", f'\n[batch]\ngpu_request = "{spelling}"\n'
            )
        )
        monkeypatch.setenv("LUMBERJACK_SITE_PROFILES", str(tmp_path))
        [shown] = scripts("t", queue="gpu", gpus=1)
        assert f"#SBATCH {expected}\n" in shown["script"]
        assert "srun --nodes=1" in shown["script"] and f" {expected} " in shown["script"]


def test_gpu_request_is_checked(tmp_path, monkeypatch):
    text = find_profile("testbed").path.read_text()
    (tmp_path / "t.toml").write_text(
        text.replace('name = "testbed"', 'name = "t"').replace(
            "\n[batch]\n", '\n[batch]\ngpu_request = "gpus"\n'
        )
    )
    monkeypatch.setenv("LUMBERJACK_SITE_PROFILES", str(tmp_path))
    result = run("sites", "show", "t")
    assert result.exit_code == 7  # a profile file that does not load: a setup mistake
    assert '[batch].gpu_request "gpus" is not one of the choices' in result.output


# ---- the shown script is the agent's ---------------------------------------------------


def test_shown_script_is_byte_for_byte_what_the_agent_renders():
    testbed = find_profile("testbed")
    request = build_request(testbed, nodes=3, pilots=3, cores=2, walltime="20m")
    layout = ExportLayout("/home/hpcuser/lumberjack/calib")
    shown = plans.pilot_scripts(request, testbed, layout.root)
    # What the agent does: launch.json written at home, read at the site, one script per
    # pilot from the plan's request (site/pools/pool.py submit_pilots).
    plan = decode(LaunchPlan, encode(plans.pool_plan(request, testbed, layout)), "launch.json")
    batch = get_batch_system(plan.batch_system)
    agent = [pilot_script(plan.spec, layout, batch, number) for number in (1, 2, 3)]
    assert [(item["name"], item["script"]) for item in shown] == agent
    assert [name for name, _ in agent] == ["lj-calib-1", "lj-calib-2", "lj-calib-3"]


def test_unexpanded_base_dir_is_shown_as_written():
    [shown] = scripts("perlmutter", queue="regular-gpu")
    profile = find_profile("perlmutter")
    [unexpanded] = plans.pilot_scripts(
        build_request(profile, queue="regular-gpu"), profile, "$SCRATCH/lumberjack/calib"
    )
    assert unexpanded["script"] == shown["script"].replace("/sc/lj", "$SCRATCH/lumberjack")
    assert "#SBATCH --qos=regular\n#SBATCH --constraint=gpu\n" in shown["script"]


def test_show_script_on_sites_check_and_lease_create():
    checked = run("sites", "check", "perlmutter", "--queue", "regular-gpu", "--show-script")
    assert checked.exit_code == 0, checked.output
    assert "--- pilot script lj-EXPORT-1 (for sbatch; rendered by the site agent's code; " in (
        checked.output
    )
    assert "#SBATCH --output=$SCRATCH/lumberjack/EXPORT/pilots/out/%x-%j.out" in checked.output
    lease = run("lease", "create", "big", "--site", "testbed", "--nodes", "2", "--pilots", "2",
                "--dry-run", "--show-script", "--json")  # fmt: skip
    assert lease.exit_code == 0, lease.output
    answer = json.loads(lease.output)
    assert [item["name"] for item in answer["pilot_scripts"]] == [
        "lj-lease-big-1",
        "lj-lease-big-2",
    ]
    assert answer["request"]["node_hours"] == 1.0


def test_show_script_needs_a_dry_run():
    lease = run("lease", "create", "big", "--site", "testbed", "--show-script")
    assert (lease.exit_code, lease.output) == (
        2, "error: --show-script goes with --dry-run: it shows the scripts before anything is "
        "submitted\n",
    )  # fmt: skip
    export = run("export", "--ids", "1", "--site", "testbed", "--show-script", "--json")
    assert export.exit_code == 2
    assert json.loads(export.output)["error"].startswith("--show-script goes with --site SITE")
