"""A lease with schedd placement "allocation" (site side): the head's configs and
script, the pool kinds the agent picks, and the join and release files in the lease's
directory that the head node acts on."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import load_fixture_module

from lumberjack.core.contract import ExportLayout, LaunchPlan, PilotRequest, encode
from lumberjack.site.batch import get_batch_system
from lumberjack.site.files import AgentError
from lumberjack.site.pools import (
    InAllocation,
    Joined,
    Lease,
    LoginNode,
    Own,
    allocation,
    lease_pool_for,
    pool_for,
)
from lumberjack.site.pools import lease as lease_module
from lumberjack.site.pools.pool import Pool
from lumberjack.site.remote_pool import PoolSettings

config_values = load_fixture_module("condor_config").config_values
SLURM = get_batch_system("slurm")


def settings(layout: ExportLayout, **more) -> PoolSettings:
    return PoolSettings(layout=layout, site_user="hpcuser", address="10.0.0.5", port=40123,
                        image="/images/site.sif", **more)  # fmt: skip


def plan(**more) -> LaunchPlan:
    spec = PilotRequest(nodes=1, cores_per_node=2, memory_per_node_mb=0, gpus_per_node=0,
                        walltime_s=600, retire_s=60)  # fmt: skip
    return LaunchPlan(runtime="apptainer", image="/images/site.sif", batch_system="slurm",
                      pilots=1, spec=spec, token_lifetime_s=900, placement="allocation",
                      **more)  # fmt: skip


def test_the_head_runs_the_leases_collector_and_negotiator_only() -> None:
    lease = ExportLayout("/sites/lease-calib")
    values = config_values(
        allocation.head_config(settings(lease))
        + lease_module.central_manager_lines(settings(lease))
    )
    assert values["DAEMON_LIST"] == "MASTER, SHARED_PORT, COLLECTOR, NEGOTIATOR"
    assert values["COLLECTOR_HOST"] == "$(CONDOR_HOST):$ENV(LJ_HEAD_PORT)"
    assert values["CONDOR_HOST"] == "$ENV(LJ_HEAD_ADDRESS)"
    assert values["RUN"] == "$ENV(LJ_HEAD_RUN)/run"


def test_a_joined_schedd_on_the_head_reports_to_the_collector_announced() -> None:
    lease, export = ExportLayout("/sites/lease-calib"), ExportLayout("/sites/run-1")
    domain = settings(lease).trust_domain
    values = config_values(allocation.joined_alloc_schedd_config(settings(export), domain))
    assert values["DAEMON_LIST"] == "MASTER, SCHEDD"
    assert values["COLLECTOR_HOST"] == "$ENV(LJ_COLLECTOR)"
    assert values["NETWORK_INTERFACE"] == "$ENV(LJ_HEAD_ADDRESS)"
    assert values["SPOOL"] == export.spool  # on the shared filesystem
    assert values["RUN"] == "$ENV(LJ_HEAD_RUN)/run-1/run"  # sockets on the node
    assert values["LOCK"] == "$ENV(LJ_HEAD_RUN)/run-1/lock"
    # Its own trust domain and key, as on the login node (a shared lease: see
    # test_leases.py); only the lease's negotiator, by token, may negotiate.
    assert values["SEC_PASSWORD_DIRECTORY"] == "$(LOCAL_DIR)/passwords.d"
    assert values["LOCAL_DIR"] == export.pool_local
    assert values["TRUST_DOMAIN"] == "lumberjack-run-1"
    assert values["ALLOW_NEGOTIATOR"] == "negotiator@lumberjack-run-1"
    assert values["SCHEDD.SEC_CLIENT_AUTHENTICATION_METHODS"] == "IDTOKENS"


def test_the_head_collector_takes_joined_schedds_only_by_their_own_token() -> None:
    """The same rules as a lease's collector on the login node (lease_collector_rules)."""
    lease = ExportLayout("/sites/lease-calib")
    head = config_values(
        allocation.head_config(settings(lease))
        + lease_module.central_manager_lines(settings(lease))
    )
    login = config_values(lease_module.lease_config(settings(lease)))
    for key in (
        "COLLECTOR_REQUIREMENTS",
        "ALLOW_ADVERTISE_SCHEDD",
        "SEC_ADVERTISE_SCHEDD_AUTHENTICATION_METHODS",
        "NEGOTIATOR_UPDATE_INTERVAL",
    ):
        assert head[key] == login[key], key
    assert "schedd-*@lumberjack-lease-calib" in head["ALLOW_ADVERTISE_SCHEDD"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_the_schedd_script_and_the_lease_node_script_pass_bash_n(tmp_path: Path) -> None:
    lease, export = ExportLayout("/sites/lease-calib"), ExportLayout("/sites/my run")
    scripts = {
        "schedd.sh": allocation.schedd_script(settings(export)),
        "node.sh": lease_node_script(lease),
    }
    for name, text in scripts.items():
        (tmp_path / name).write_text(text)
        result = subprocess.run(["bash", "-n", str(tmp_path / name)], capture_output=True)
        assert result.returncode == 0, (name, result.stderr)
    assert (
        "CONDOR_CONFIG='/sites/my run/pool/condor_config' condor_master -f" in scripts["schedd.sh"]
    )
    assert "mkdir -p \"$LJ_HEAD_RUN\"/'my run'/run" in scripts["schedd.sh"]


def lease_node_script(lease: ExportLayout) -> str:
    return allocation.allocation_node_script(
        settings(lease), batch=SLURM, cores=2, memory_mb=0, walltime_s=600, retire_s=60,
        login_address="10.0.0.5", token_lifetime_s=900,
        ready=f"{lease.pool_local}/log/.collector_address", joined_dir=lease.joined,
    )  # fmt: skip


def test_the_head_polls_joined_while_startds_run_and_stops_the_schedds_before_its_pool() -> None:
    script = lease_node_script(ExportLayout("/sites/lease-calib"))
    announce = script.index("/sites/lease-calib/pool/collector-address.new")
    first_tick = script.index("\njoined_tick\n")
    startd = script.index("CONDOR_CONFIG=/sites/lease-calib/pilots/condor_config condor_master")
    loop_tick = script.index("    joined_tick\n", startd)
    stop_all = script.index("    joined_stop_all\n", loop_tick)
    pool_end = script.index('kill -TERM "$head_master"', stop_all)
    assert announce < first_tick < startd < loop_tick < stop_all < pool_end
    assert "until [ -s /sites/lease-calib/pool/local/log/.collector_address ]" in script
    # TERM (scancel, walltime) stops the joined schedds too, then the pool.
    trap = script[script.rindex("stop() {") :]
    assert trap.index("joined_stop_all") < trap.index('kill -TERM "$head_master"')
    # An export's node script has none of it.
    export = allocation.allocation_node_script(
        settings(ExportLayout("/sites/run-1")), batch=SLURM, cores=2, memory_mb=0,
        walltime_s=600, retire_s=60, login_address="10.0.0.5", token_lifetime_s=900,
    )  # fmt: skip
    assert "joined" not in export


def test_the_agent_picks_the_kind_of_pool_by_placement() -> None:
    lease, export = ExportLayout("/sites/lease-calib"), ExportLayout("/sites/run-1")
    login = replace(plan(), placement="login")

    def kind(pool: Pool) -> tuple[type, type]:
        return type(pool.placement), type(pool.role)

    assert kind(lease_pool_for(lease, plan())) == (InAllocation, Lease)
    assert kind(lease_pool_for(lease, login)) == (LoginNode, Lease)
    assert kind(pool_for(export, plan(lease=lease.root))) == (InAllocation, Joined)
    assert kind(pool_for(export, replace(login, lease=lease.root))) == (LoginNode, Joined)
    assert kind(pool_for(export, plan())) == (InAllocation, Own)
    assert kind(pool_for(export, login)) == (LoginNode, Own)


def make_lease(tmp_path: Path) -> tuple[ExportLayout, ExportLayout, Pool]:
    lease = ExportLayout(str(tmp_path / "lease-calib"))
    export = ExportLayout(str(tmp_path / "run-1"))
    Path(lease.joined).mkdir(parents=True)
    Path(lease.launch_plan).write_text(encode(plan()))
    return lease, export, pool_for(export, plan(lease=lease.root))


def test_a_release_with_no_round_running_needs_no_acknowledgement(tmp_path: Path) -> None:
    lease, export, pool = make_lease(tmp_path)
    Path(lease.joined, "run-1").write_text(export.root + "\n")
    Path(lease.joined, "run-2").write_text(str(tmp_path / "run-2") + "\n")
    leases = lease_pool_for(lease, plan())
    holder = leases.role
    assert holder.members() == [export, ExportLayout(str(tmp_path / "run-2"))]
    answer = pool.stop()  # no pilot of the lease was ever submitted: no head holds it
    assert answer.stopped_schedd is False and answer.cancelled_pilots == []
    assert Path(lease.joined, "run-1~release").exists()
    assert holder.members() == [ExportLayout(str(tmp_path / "run-2"))]
    assert leases.placement.joined_states() == {
        "run-1": "leaving",
        "run-2": "joined",
    }
    Path(lease.joined, "run-1~released").touch()  # the head's acknowledgement
    assert pool.placement.wait_released() is True
    assert leases.placement.joined_states() == {
        "run-1": "released",
        "run-2": "joined",
    }


def test_a_released_export_is_not_joined_again(tmp_path: Path) -> None:
    lease, export, pool = make_lease(tmp_path)
    Path(lease.joined, "run-1~release").touch()
    Path(export.root).mkdir()
    with pytest.raises(AgentError, match="has left lease-calib; fetch it"):
        pool.launch()


def test_an_export_cannot_join_a_lease_that_does_not_run(tmp_path: Path) -> None:
    lease = ExportLayout(str(tmp_path / "lease-gone"))
    pool = pool_for(ExportLayout(str(tmp_path / "run-1")), plan(lease=lease.root))
    with pytest.raises(AgentError, match="lease-gone does not run at the site"):
        pool.role.lease()
    assert pool.stop().stopped_schedd is False  # nothing there to release
