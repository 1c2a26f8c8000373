"""The remote pool's configs and node.sh (remote_pool.py): who may do what, per-export
trust, startd naming and retirement; node.sh checked by bash and run with a stand-in
apptainer (no HTCondor daemons)."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import load_fixture_module

from lumberjack.core.contract import ExportLayout
from lumberjack.site import remote_pool
from lumberjack.site.batch import SYSTEMS, get_batch_system
from lumberjack.site.pools import allocation
from lumberjack.site.pools import lease as lease_module
from lumberjack.site.remote_pool import PoolSettings

SLURM = get_batch_system("slurm")
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


def make_settings(root: str = "/scratch/lj/calib", **overrides) -> PoolSettings:
    values = dict(
        layout=ExportLayout(root),
        site_user="hpcuser",
        address="10.0.0.5",
        port=40123,
        image="/images/lumberjack-site.sif",
        binds=("/scratch/data",),
        idle_shutdown_s=420,
    )
    values.update(overrides)
    return PoolSettings(**values)


config_values = load_fixture_module("condor_config").config_values  # rendered configs, read


def allow_rules(text: str) -> dict[str, list[str]]:
    return {
        name: value.split()
        for name, value in config_values(text).items()
        if name.startswith("ALLOW_") or name.startswith("DENY_")
    }


CONFIGS = {
    "pool": remote_pool.pool_config,
    "pilot": remote_pool.pilot_config,
}


@pytest.mark.parametrize("which", sorted(CONFIGS))
def test_no_wildcard_in_any_allow_rule(which: str) -> None:
    settings = make_settings()
    rules = allow_rules(CONFIGS[which](settings))
    assert rules, "the config must say who is allowed"
    for name, identities in rules.items():
        for identity in identities:
            user, _, host = identity.partition("@")
            # As designed: no '*' anywhere, every identity is user@this export's domain.
            assert "*" not in identity, f"{name} allows {identity}"
            assert user and host == settings.trust_domain, f"{name}: {identity}"


@pytest.mark.parametrize("which", sorted(CONFIGS))
def test_only_the_site_account_and_pilots_are_allowed(which: str) -> None:
    settings = make_settings()
    rules = allow_rules(CONFIGS[which](settings))
    everyone = {identity for identities in rules.values() for identity in identities}
    assert everyone == {
        settings.owner_identity,
        f"condor@{settings.trust_domain}",
        settings.pilot_identity,
    }
    # A pilot may advertise its startd and read, never write or administer.
    assert rules["ALLOW_ADVERTISE_STARTD"] == [settings.pilot_identity]
    for rule in ("ALLOW_WRITE", "ALLOW_ADMINISTRATOR", "ALLOW_NEGOTIATOR"):
        assert settings.pilot_identity not in rules[rule]


def test_security_is_required_everywhere() -> None:
    for make in CONFIGS.values():
        values = config_values(make(make_settings()))
        for knob in ("AUTHENTICATION", "ENCRYPTION", "INTEGRITY"):
            assert values[f"SEC_DEFAULT_{knob}"] == "REQUIRED"


def test_pilots_advertise_with_their_token_only() -> None:
    settings = make_settings()
    pilot = config_values(remote_pool.pilot_config(settings))
    # FS first for the node's own daemons (master -> startd -> starter on one node);
    # towards the pool a startd's advertisement is accepted with the token only.
    methods = [m.strip() for m in pilot["SEC_CLIENT_AUTHENTICATION_METHODS"].split(",")]
    assert methods == ["FS", "IDTOKENS"]
    assert pilot["SEC_USE_FAMILY_SESSION"] == "FALSE"
    pool_values = config_values(remote_pool.pool_config(settings))
    assert pool_values["SEC_ADVERTISE_STARTD_AUTHENTICATION_METHODS"] == "IDTOKENS"
    assert pilot["SEC_TOKEN_DIRECTORY"] == settings.layout.pilot_tokens
    # The login node's tools authenticate by file system; the pilots' token is accepted.
    pool = config_values(remote_pool.pool_config(settings))
    methods = [m.strip() for m in pool["SEC_CLIENT_AUTHENTICATION_METHODS"].split(",")]
    assert methods == ["FS", "IDTOKENS"]
    assert "IDTOKENS" in pool["SEC_DEFAULT_AUTHENTICATION_METHODS"]


def test_trust_domain_is_per_export() -> None:
    one = make_settings("/scratch/lj/calib")
    two = make_settings("/scratch/lj/other")
    assert one.trust_domain != two.trust_domain
    for settings in (one, two):
        for make in CONFIGS.values():
            values = config_values(make(settings))
            assert values["TRUST_DOMAIN"] == settings.trust_domain
            assert values["UID_DOMAIN"] == settings.trust_domain
    assert one.pilot_identity.endswith("@" + one.trust_domain)
    assert two.trust_domain not in remote_pool.pool_config(one)
    assert two.trust_domain not in remote_pool.pilot_config(one)


def test_pool_config_points_at_the_export() -> None:
    settings = make_settings()
    values = config_values(remote_pool.pool_config(settings))
    assert values["SPOOL"] == settings.layout.spool
    assert values["LOCAL_DIR"] == settings.layout.pool_local
    assert values["COLLECTOR_HOST"] == "10.0.0.5:40123"
    assert values["SHARED_PORT_PORT"] == "40123"
    assert values["NETWORK_INTERFACE"] == "10.0.0.5"
    pilot = config_values(remote_pool.pilot_config(settings))
    assert pilot["COLLECTOR_HOST"] == "10.0.0.5:40123"
    assert "STARTD" in pilot["DAEMON_LIST"] and "SCHEDD" not in pilot["DAEMON_LIST"]


def test_the_sites_policy_cap_becomes_max_jobs_running() -> None:
    capped = config_values(remote_pool.pool_config(make_settings(max_running_jobs=64)))
    assert capped["MAX_JOBS_RUNNING"] == "64"
    # No cap in the profile: HTCondor's own default stands.
    assert "MAX_JOBS_RUNNING" not in config_values(remote_pool.pool_config(make_settings()))


def test_startd_names_come_from_the_node_id() -> None:
    values = config_values(remote_pool.pilot_config(make_settings()))
    assert values["STARTD_NAME"] == "$ENV(LJ_NODE_ID)"
    assert values["MASTER_NAME"] == "$ENV(LJ_NODE_ID)"
    assert values["LOCAL_DIR"] == "$ENV(LJ_NODE_DIR)"
    script = remote_pool.node_script(
        make_settings(), batch=SLURM, cores=2, memory_mb=0, walltime_s=3600, retire_s=300
    )
    # unique per pilot and node: the batch job id and the node's name
    assert 'export LJ_NODE_ID="pilot-$LJ_PILOT_ID-$node"' in script
    assert "SLURM_JOB_ID" in script and "SLURMD_NODENAME" in script


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_node_script_reads_its_own_systems_variables(name: str) -> None:
    batch = get_batch_system(name)
    script = remote_pool.node_script(
        make_settings(), batch=batch, cores=2, memory_mb=0, walltime_s=3600, retire_s=300
    )
    assert f"pilot=${{{batch.JOB_ID_ENV}:-$$}}\n" in script
    if batch.NODE_NAME_ENV:
        assert f"node=${{{batch.NODE_NAME_ENV}:-$(hostname -s)}}\n" in script
    else:
        assert "node=$(hostname -s)\n" in script
    others = [cls.JOB_ID_ENV for cls in SYSTEMS.values() if cls.NAME != name]
    assert not any(variable in script for variable in others)


def test_start_is_tied_to_the_retire_time() -> None:
    values = config_values(remote_pool.pilot_config(make_settings(runtime_name="none")))
    assert values["LUMBERJACK_RETIRE_TIME"] == "$ENV(LJ_RETIRE_TIME)"
    assert values["START"] == "time() < LUMBERJACK_RETIRE_TIME"
    # Apptainer: the same, and the job guard of the nested container (test_isolation.py).
    contained = config_values(remote_pool.pilot_config(make_settings()))["START"]
    assert contained.startswith("($(START)) && ")
    assert "LUMBERJACK_RETIRE_TIME" in values["STARTD_ATTRS"].split()
    script = remote_pool.node_script(
        make_settings(), batch=SLURM, cores=2, memory_mb=1000, walltime_s=3600, retire_s=300
    )
    assert "export LJ_RETIRE_TIME=$(( $(date +%s) + 3600 - 300 ))" in script


def test_idle_startds_shut_down() -> None:
    values = config_values(remote_pool.pilot_config(make_settings(idle_shutdown_s=420)))
    assert values["STARTD_NOCLAIM_SHUTDOWN"] == "420"


@pytest.mark.parametrize("runtime", ["apptainer", "none"])
def test_startds_probe_only_the_transfer_plugins_a_job_here_can_use(runtime: str) -> None:
    # Every listed plugin runs before the startd first advertises; box, gdrive and
    # onedrive need a credd that no lumberjack pool runs.
    settings = make_settings(runtime_name=runtime, release="/scratch/lj/release")
    plugins = config_values(remote_pool.pilot_config(settings))["FILETRANSFER_PLUGINS"]
    assert [p.strip() for p in plugins.split(",")] == [
        "$(LIBEXEC)/curl_plugin", "$(LIBEXEC)/data_plugin",
    ]  # fmt: skip


def test_a_new_startd_is_matched_within_a_second() -> None:
    # Nothing tells the negotiator that a pilot's startd arrived: its next cycle does.
    for config in (remote_pool.pool_config(make_settings()),
                   lease_module.lease_config(make_settings())):  # fmt: skip
        values = config_values(config)
        assert values["NEGOTIATOR_INTERVAL"] == "1"
        assert values["NEGOTIATOR_CYCLE_DELAY"] == "1"  # quiet after a long cycle
        assert values["NEGOTIATOR_MIN_INTERVAL"] == "1"


@needs_bash
@pytest.mark.parametrize("memory_mb", [0, 2048])
def test_node_script_passes_bash_n(tmp_path: Path, memory_mb: int) -> None:
    script = tmp_path / "node.sh"
    script.write_text(
        remote_pool.node_script(
            make_settings(), batch=SLURM, cores=4, memory_mb=memory_mb, walltime_s=600, retire_s=60
        )
    )
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_node_script_has_the_retire_trap() -> None:
    script = remote_pool.node_script(
        make_settings(), batch=SLURM, cores=2, memory_mb=0, walltime_s=600, retire_s=60
    )
    assert "trap retire_once USR1" in script
    assert "trap stop TERM INT" in script
    assert "condor_off -peaceful -master" in script
    settings = make_settings()
    command = remote_pool.retire_command(settings.layout, SLURM)
    # The pilot never signals through the launcher: srun would signal the jobs too.
    assert "kill" not in command and "lj_launcher_pid" not in command
    assert remote_pool.retire_dir(settings.layout) in command
    assert "SLURM_JOB_ID" in command


def test_paths_with_spaces_are_quoted() -> None:
    settings = make_settings(
        "/scratch/my exports/calib run",
        image="/images/site image.sif",
        binds=("/data/with space",),
    )
    script = remote_pool.node_script(
        settings, batch=SLURM, cores=2, memory_mb=0, walltime_s=600, retire_s=60
    )
    master = next(line for line in script.splitlines() if "condor_master -f" in line)
    words = shlex.split(master.rstrip("&"))
    assert words[:2] == ["apptainer", "-s"]
    binds = [words[i + 1] for i, word in enumerate(words) if word == "--bind"]
    assert "/scratch/my exports/calib run" in binds
    assert binds.index("/data/with space") == binds.index("/scratch/my exports/calib run") + 1
    assert "/images/site image.sif" in words
    assert f"CONDOR_CONFIG={settings.layout.pilot_config}" in words
    node_dir = next(line for line in script.splitlines() if line.startswith("export LJ_NODE_DIR"))
    assert shlex.quote(settings.layout.pilots) in node_dir


STUB_APPTAINER = """#!/bin/bash
# Stands in for apptainer: records its arguments; condor_master runs until TERM,
# condor_off stops it (as a peaceful shutdown of an idle node does).
printf '%s\\n' "$@" > "$STUB_DIR/call-$(date +%s%N)-$$"
for arg; do
    case "$arg" in
    condor_master)
        echo $$ > "$STUB_DIR/master.pid"
        echo "<10.0.0.9:9618>" > "$LJ_NODE_DIR/log/.master_address"
        trap 'exit 0' TERM
        while :; do sleep 0.05; done ;;
    condor_off)
        kill -TERM "$(cat "$STUB_DIR/master.pid")"
        exit 0 ;;
    esac
done
"""


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def start_node(tmp_path: Path):  # -> (settings, calls dir, Popen, env)
    """node.sh of a pilot 4242 on node c7, run for real with the stand-in apptainer,
    under a path with spaces; returns once its master is up."""
    root = tmp_path / "my exports" / "calib"
    settings = make_settings(str(root), image=str(tmp_path / "site image.sif"))
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "apptainer").write_text(STUB_APPTAINER)
    (stub / "apptainer").chmod(0o755)
    calls = tmp_path / "calls"
    calls.mkdir()
    script = Path(settings.layout.node_script)
    script.parent.mkdir(parents=True)
    script.write_text(
        remote_pool.node_script(
            settings, batch=SLURM, cores=3, memory_mb=0, walltime_s=600, retire_s=60
        )
    )
    script.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{stub}:{os.environ['PATH']}",
        "STUB_DIR": str(calls),
        "SLURM_JOB_ID": "4242",
        "SLURMD_NODENAME": "c7",
    }
    node_dir = Path(settings.layout.pilots, "nodes", "pilot-4242-c7")
    proc = subprocess.Popen(
        [str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: (node_dir / "log" / ".master_address").exists())
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    for sub in ("log", "lock", "run", "execute", "spool"):
        assert (node_dir / sub).is_dir()
    return settings, calls, proc, env


@needs_bash
def test_the_pilots_retire_mark_retires_the_node(tmp_path: Path) -> None:
    """The pilot script's own retire command (run as the pilot runs it, with the batch
    job's id in the environment) leaves a mark; node.sh finds it and turns its node
    off peacefully. No signal is sent, so none can reach the running jobs."""
    settings, calls, proc, env = start_node(tmp_path)
    try:
        command = remote_pool.retire_command(settings.layout, SLURM)
        subprocess.run(["bash", "-c", "set -u; " + command], env=env, check=True)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "retiring" in out, (out, err)
    assert proc.returncode == 0, (proc.returncode, out, err)
    assert any("condor_off" in p.read_text() for p in calls.glob("call-*"))


@needs_bash
def test_node_script_runs_and_retires_on_usr1(tmp_path: Path) -> None:
    """A real run of node.sh (stand-in apptainer), under a path with spaces: the node
    directories appear, USR1 turns the node off peacefully through its master's address
    file, and node.sh exits with the master's own status."""
    settings, calls, proc, _env = start_node(tmp_path)
    root = Path(settings.layout.root)
    try:
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "retiring" in out, (out, err)
    assert proc.returncode == 0, (proc.returncode, out, err)
    recorded = [p.read_text().splitlines() for p in sorted(calls.glob("call-*"))]
    master = next(args for args in recorded if "condor_master" in args)
    assert str(root) in [master[i + 1] for i, arg in enumerate(master) if arg == "--bind"]
    assert str(tmp_path / "site image.sif") in master
    off = next(args for args in recorded if "condor_off" in args)
    assert off[off.index("-addr") + 1] == "<10.0.0.9:9618>"
    assert "_CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS=FS" in off


# ---- schedd placement "allocation" ------------------------------------------------------


def test_head_config_takes_the_head_nodes_address_and_port_from_node_sh() -> None:
    settings = make_settings(max_running_jobs=7)
    values = config_values(allocation.head_config(settings))
    assert values["CONDOR_HOST"] == "$ENV(LJ_HEAD_ADDRESS)"
    assert values["NETWORK_INTERFACE"] == "$ENV(LJ_HEAD_ADDRESS)"
    assert values["SHARED_PORT_PORT"] == "$ENV(LJ_HEAD_PORT)"
    assert values["COLLECTOR_HOST"] == "$(CONDOR_HOST):$ENV(LJ_HEAD_PORT)"
    # The queue stays on the shared filesystem; sockets and locks do not.
    assert values["SPOOL"] == settings.layout.spool
    assert values["RUN"] == "$ENV(LJ_HEAD_RUN)/run"
    assert values["LOCK"] == "$ENV(LJ_HEAD_RUN)/lock"
    assert values["MAX_JOBS_RUNNING"] == "7"
    assert "SCHEDD" in values["DAEMON_LIST"] and "COLLECTOR" in values["DAEMON_LIST"]


def test_allocation_startds_find_the_collector_their_head_announced() -> None:
    values = config_values(allocation.allocation_pilot_config(make_settings()))
    assert values["COLLECTOR_HOST"] == "$ENV(LJ_COLLECTOR)"
    assert "SCHEDD" not in values["DAEMON_LIST"]


def allocation_script(**overrides) -> str:
    return allocation.allocation_node_script(
        make_settings(**overrides), batch=SLURM, cores=2, memory_mb=0, walltime_s=600,
        retire_s=60, login_address="10.0.0.5", token_lifetime_s=3600,
    )  # fmt: skip


@needs_bash
def test_allocation_node_script_passes_bash_n(tmp_path: Path) -> None:
    script = tmp_path / "node.sh"
    script.write_text(allocation_script())
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_allocation_node_script_orders_head_then_startd_then_pool_end() -> None:
    script = allocation_script()
    layout = make_settings().layout
    claim = script.index(f'mkdir {allocation.heads_dir(layout)}/"$LJ_PILOT_ID"')
    pool = script.index(f"CONDOR_CONFIG={layout.pool_config} condor_master -f")
    token = script.index("condor_token_create -identity pilot@lumberjack-calib")
    announce = script.index(f"> {allocation.collector_file(layout)}.new")
    wait = script.index('if [ "$owner" = "$LJ_PILOT_ID" ]; then break; fi')
    startd = script.index(f"CONDOR_CONFIG={layout.pilot_config} condor_master -f")
    end = script.index("no startd left; stopping the pool")
    assert claim < pool < token < announce < wait < startd < end
    # TERM (scancel, walltime) reaches the pool too, so the schedd ends its log cleanly.
    assert 'kill -TERM "$head_master"' in script[script.rindex("stop() {") :]


STUB_APPTAINER_POOL = """#!/bin/bash
# Stands in for apptainer on the nodes of an allocation: the pool's condor_master writes
# the schedd's address file and runs until TERM; a startd's condor_master records the
# collector it was given and runs until condor_off; condor_status sees no startd.
config=
for arg; do case "$arg" in CONDOR_CONFIG=*) config=${arg#CONDOR_CONFIG=} ;; esac; done
for arg; do
    case "$arg" in
    condor_master)
        if [ "$config" = "$STUB_POOL_CONFIG" ]; then
            echo "pool $LJ_HEAD_ADDRESS:$LJ_HEAD_PORT" >> "$STUB_DIR/events"
            trap 'echo "pool stopped" >> "$STUB_DIR/events"; exit 0' TERM
            sleep 0.3
            echo "<$LJ_HEAD_ADDRESS:$LJ_HEAD_PORT>" > "$STUB_SPOOL/.schedd_address"
        else
            echo "startd $LJ_NODE_ID $LJ_COLLECTOR" >> "$STUB_DIR/events"
            echo $$ > "$LJ_NODE_DIR/master.pid"
            echo "<10.0.0.9:9618>" > "$LJ_NODE_DIR/log/.master_address"
            trap 'exit 0' TERM
        fi
        while :; do sleep 0.05; done ;;
    condor_token_create)
        echo "token-for-the-pilots"; exit 0 ;;
    condor_status)
        exit 0 ;;
    condor_off)
        kill -TERM "$(cat "$LJ_NODE_DIR/master.pid")"; exit 0 ;;
    esac
done
"""


@needs_bash
def test_one_node_of_a_pilot_runs_the_pool_and_every_node_finds_it(tmp_path: Path) -> None:
    """Two nodes of pilot 4242 start at once (stand-in apptainer): one claims the head,
    starts the pool, mints the token and announces its collector; both startds get that
    collector, not the one a dead earlier pilot left; retired, the nodes end and the head
    stops the pool after the last startd."""
    root = tmp_path / "my exports" / "calib"
    settings = make_settings(str(root), image=str(tmp_path / "site image.sif"))
    layout = settings.layout
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "apptainer").write_text(STUB_APPTAINER_POOL)
    (stub / "apptainer").chmod(0o755)
    calls = tmp_path / "calls"
    calls.mkdir()
    Path(layout.spool).mkdir(parents=True)
    Path(layout.pool).mkdir(parents=True)
    Path(allocation.collector_file(layout)).write_text("4241 10.9.9.9:1\n")  # dead pilot's
    script = Path(layout.node_script)
    script.parent.mkdir(parents=True)
    script.write_text(
        allocation.allocation_node_script(
            settings, batch=SLURM, cores=2, memory_mb=0, walltime_s=600, retire_s=60,
            login_address="127.0.0.1", token_lifetime_s=3600,
        )
    )  # fmt: skip
    script.chmod(0o755)
    base = {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "STUB_DIR": str(calls),
            "STUB_POOL_CONFIG": layout.pool_config, "STUB_SPOOL": layout.spool,
            "SLURM_JOB_ID": "4242", "TMPDIR": str(tmp_path)}  # fmt: skip
    nodes = [
        subprocess.Popen([str(script)], env={**base, "SLURMD_NODENAME": node},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for node in ("c1", "c2")
    ]  # fmt: skip
    try:
        events = calls / "events"
        wait_for(lambda: events.exists() and events.read_text().count("startd ") == 2, 20)
        subprocess.run(
            ["bash", "-c", "set -u; " + remote_pool.retire_command(layout, SLURM)],
            env=base, check=True,
        )  # fmt: skip
        outputs = [node.communicate(timeout=30) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
    assert [node.returncode for node in nodes] == [0, 0], outputs
    lines = events.read_text().splitlines()
    pools = [line for line in lines if line.startswith("pool 127.0.0.1:")]
    assert len(pools) == 1, lines  # one head
    collector = pools[0].split()[1]
    assert sorted(line for line in lines if line.startswith("startd")) == [
        f"startd pilot-4242-c1 {collector}",
        f"startd pilot-4242-c2 {collector}",
    ]
    assert lines[-1] == "pool stopped"  # after both startds were up and gone
    assert Path(allocation.collector_file(layout)).read_text() == f"4242 {collector}\n"
    token = Path(layout.pilot_tokens, "pilot")
    assert token.read_text() == "token-for-the-pilots\n"
    assert token.stat().st_mode & 0o077 == 0
    assert [p.name for p in Path(allocation.heads_dir(layout)).iterdir()] == ["4242"]
