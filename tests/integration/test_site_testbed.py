"""The emulated HPC site: sshd with a pinned host key, and a real 3-node Slurm cluster
that runs a pilot rendered by lumberjack.site.batch."""

from __future__ import annotations

import io
import shlex
import time

import paramiko
import pytest
from fabric import Connection
from journey import site_connection as connect
from journey import site_sh as sh

from lumberjack.site.batch import PilotSpec, PilotState, get_batch_system

pytestmark = pytest.mark.integration


@pytest.fixture
def conn(site):
    with connect(site, site.known_hosts) as connection:
        yield connection


def test_ssh_with_pinned_host_key(conn: Connection) -> None:
    assert sh(conn, "hostname").stdout.strip() == "hpc-login"
    assert sh(conn, "id -un").stdout.strip() == "hpcuser"


def test_unknown_host_key_is_refused(site, tmp_path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    connection = connect(site, empty)
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        connection.open()
    connection.close()


def test_slurm_pilot_runs_on_every_node(conn: Connection) -> None:
    slurm = get_batch_system("slurm")
    home = sh(conn, "echo $HOME").stdout.strip()
    out_dir = f"{home}/pilots"
    sh(conn, f"mkdir -p {out_dir} && rm -f ~/nodes.txt")
    spec = PilotSpec(
        name="lj-site-test",
        nodes=3,
        cores_per_node=1,
        memory_per_node_mb=0,
        gpus_per_node=0,
        walltime_s=300,
        node_command="bash -c 'echo $SLURMD_NODENAME >> ~/nodes.txt; sleep 1'",
        retire_command="true",
        retire_s=30,
        output_dir=out_dir,
    )
    script = f"{out_dir}/pilot.sh"
    conn.put(io.StringIO(slurm.render_pilot_script(spec)), script)

    result = sh(conn, shlex.join(slurm.submit_command(script)), warn=True)
    job_id = slurm.parse_submit_output(result.stdout, result.stderr, result.exited)

    deadline = time.monotonic() + 60
    state = PilotState.UNKNOWN
    while time.monotonic() < deadline:
        result = sh(conn, shlex.join(slurm.query_command([job_id])), warn=True)
        state = slurm.parse_query_output(result.stdout, [job_id], result.stderr, result.exited)[
            job_id
        ]
        if state in (PilotState.DONE, PilotState.FAILED):
            break
        time.sleep(0.5)
    logs = sh(conn, f"cat {out_dir}/*-{job_id}.* 2>/dev/null", warn=True).stdout
    assert state == PilotState.DONE, f"pilot {job_id} ended {state}; output:\n{logs}"
    nodes = sh(conn, "cat ~/nodes.txt").stdout.split()
    assert sorted(nodes) == ["c1", "c2", "c3"], logs


def test_apptainer_at_the_site(conn: Connection) -> None:
    """hpcuser builds a tiny SIF from a sandbox (no registry) and runs it in a 2-node job."""
    assert sh(conn, "apptainer --version").stdout.startswith("apptainer version 1.4.")
    build = r"""set -e
    d=$(mktemp -d ~/sandbox.XXXXXX)
    mkdir -p "$d/bin" "$d/proc" "$d/sys" "$d/dev" "$d/tmp" "$d/etc" "$d/home"
    cp /bin/dash "$d/bin/sh"
    for lib in $(ldd /bin/dash | grep -o '/[^ ]*'); do
        mkdir -p "$d$(dirname "$lib")" && cp -L "$lib" "$d$lib"
    done
    apptainer -s build --force ~/tiny.sif "$d"
    rm -rf "$d"
    """
    sh(conn, build)
    script = (
        "#!/bin/bash\nsrun -N2 apptainer -s exec --containall ~/tiny.sif /bin/sh -c 'echo in-sif'\n"
    )
    conn.put(io.StringIO(script), "apptainer-job.sh")
    job_id = sh(conn, "sbatch --parsable -N2 -o apptainer-%j.out apptainer-job.sh").stdout.strip()
    deadline = time.monotonic() + 60
    while sh(conn, f"squeue -h -j {job_id}", warn=True).stdout.strip():
        assert time.monotonic() < deadline, f"job {job_id} still queued or running"
        time.sleep(0.5)
    assert sh(conn, f"cat apptainer-{job_id}.out").stdout.split() == ["in-sif", "in-sif"]
