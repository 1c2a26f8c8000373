"""What a pilot's token allows, on the testbed's real remote pool: it reads and advertises
a startd, and nothing more. Holding only that token (what any process on a compute node
could take), submit, qedit, hold, rm, a runtime config change, reconfig, turning the
schedd off and advertising a schedd are all refused; the jobs run all the same, and
everything of the export at the site is the site account's alone (0700/0600)."""

from __future__ import annotations

import base64
import json
import os
import shlex
import stat
import uuid
from pathlib import Path

import pytest
from journey import (
    last_json,
    lumberjack,
    make_job_dir,
    query,
    site_path,
    site_run,
    stop_at_site,
    submit,
    wait_finished,
)

from lumberjack.profiles.sites import find_profile
from lumberjack.site import remote_pool
from lumberjack.state import plans

pytestmark = pytest.mark.integration

#: Each attempt: the command (after the tool's name) and the pool state it would change.
ATTEMPTS = {
    "submit": "condor_submit {where} {submit_file}",
    "qedit": "condor_qedit {where} {cluster} JobPrio 42",
    "hold": "condor_hold {where} {cluster}",
    "rm": "condor_rm {where} {cluster}",
    "config -set": "condor_config_val {where} -schedd -set 'LJ_ATTACK = 1'",
    "reconfig": "condor_reconfig {where} -schedd",
    "off": "condor_off {where} -schedd",
    "advertise schedd": "condor_advertise -tcp -pool {collector} UPDATE_SCHEDD_AD {fake_ad}",
}  # fmt: skip


#: Where the site's HTCondor daemons create their own files (with their own umask).
DAEMON_AREAS = (
    "pool/local",
    "pilots/nodes",
    "spool",
    "pool/hostcert.pem",
    "pool/trust_domain_ca.pem",
)


def as_pilot(remote_dir: str, command: str) -> tuple[int, str]:
    """Run an HTCondor tool in the site image with the pilots' config and token only
    (IDTOKENS; no FS, which a compute node has not): exit code and output."""
    image = find_profile("testbed").container.image
    node = "LJ_NODE_DIR=/tmp LJ_NODE_ID=intruder LJ_CPUS=1 LJ_MEMORY_MB=64 LJ_PILOT_ID=0"
    line = (
        f"apptainer -s exec --bind {shlex.quote(remote_dir)} {shlex.quote(image)} "
        f"env CONDOR_CONFIG={shlex.quote(remote_dir)}/pilots/condor_config {node} "
        f"LJ_RETIRE_TIME=0 _CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS=IDTOKENS {command} 2>&1; "
        'echo "exit=$?"'
    )
    out = site_run(line, check=False)
    body, _, code = out.rstrip().rpartition("exit=")
    return int(code), body.strip()


def token_claims(remote_dir: str) -> dict:
    token = site_path(remote_dir).joinpath("pilots", "tokens.d", "pilot").read_text().strip()
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def wide_modes(root: Path) -> list[str]:
    """Everything below root (and root) that the site's other accounts could read."""
    found = []
    for directory, _, files in os.walk(root):
        for path in (Path(directory), *(Path(directory) / f for f in files)):
            mode = path.lstat().st_mode
            if not stat.S_ISLNK(mode) and mode & 0o077:
                found.append(f"{path.relative_to(root)} {stat.filemode(mode)}")
    return found


def test_a_pilot_token_reads_and_advertises_and_nothing_more(
    workspace: Path, state_dir: Path, site
) -> None:
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 3, arguments="$(Process) $(code) 5")
    name = f"token-{uuid.uuid4().hex[:6]}"
    exported = last_json(
        lumberjack(
            "export", "--ids", str(cluster), "--site", "testbed", "--nodes", "1",
            "--cores", "2", "--walltime", "20m", "--name", name, "--json",
        )
    )  # fmt: skip
    remote_dir = exported["remote_dir"]
    try:
        lumberjack("ship", name)
        # Shipped: the export's directory is closed to the site's other accounts at once.
        assert stat.S_IMODE(site_path(remote_dir).stat().st_mode) == 0o700
        lumberjack("launch", name)
        # Launched: the directory is still 0700, and everything lumberjack wrote in it is
        # the site account's alone; the daemons' own files (logs, addresses, sandboxes:
        # HTCondor sets its own umask) are only reachable through that directory.
        root = site_path(remote_dir)
        assert stat.S_IMODE(root.stat().st_mode) == 0o700
        wide = wide_modes(root)
        print("\n".join(wide))
        assert [w for w in wide if not w.startswith(DAEMON_AREAS)] == []
        assert not any(w.startswith("spool/lumberjack-inputs") for w in wide)
        for ours in ("bundle", "pilots/tokens.d", "pool/condor_config", "launch.json"):
            assert stat.S_IMODE((root / ours).stat().st_mode) in (0o700, 0o600), ours

        claims = token_claims(remote_dir)
        trust = f"lumberjack-{name}"
        assert claims["sub"] == f"{remote_pool.PILOT_IDENTITY}@{trust}"
        assert claims["scope"].split() == [f"condor:/{a}" for a in remote_pool.PILOT_AUTHZ]
        assert set(claims["scope"].split()) == {
            "condor:/READ", "condor:/ADVERTISE_STARTD", "condor:/ADVERTISE_MASTER",
        }  # fmt: skip
        assert claims["exp"] - claims["iat"] == 20 * 60 + plans.PILOT_TOKEN_MARGIN_S

        state = json.loads(site_path(remote_dir).joinpath("pool", "state.json").read_text())
        collector = f"{state['address']}:{state['port']}"
        where = f"-pool {collector} -name {shlex.quote(f'{name}@{trust}')}"
        # The control: the token does authenticate, and may read the queue.
        code, listed = as_pilot(remote_dir, f"condor_q {where} -allusers -af ClusterId")
        assert code == 0, listed
        assert listed.split() == [str(cluster)] * 3
        scratch = f"{remote_dir}.intruder"
        site_run(
            f"mkdir -p {scratch} && printf 'executable = /bin/true\\nqueue\\n' > {scratch}/j.sub"
            f' && printf \'MyType = "Scheduler"\\nName = "fake@{trust}"\\n\' > {scratch}/ad',
        )
        refused = {}
        for what, template in ATTEMPTS.items():
            command = template.format(
                where=where, cluster=cluster, collector=collector,
                submit_file=f"{scratch}/j.sub", fake_ad=f"{scratch}/ad",
            )  # fmt: skip
            refused[what] = as_pilot(remote_dir, command)
        print(json.dumps(refused, indent=1))
        site_run(f"rm -rf {scratch}")
        for what, (code, output) in refused.items():
            assert code != 0, (what, output)
        # Where the tool says why, the schedd, master or collector refused the pilot's
        # identity; the others fail without a reason, and the checks below show they
        # changed nothing.
        for what in ("submit", "hold", "rm", "reconfig"):
            assert f'Received "DENIED" from server for user pilot@{trust}' in refused[what][1]

        # Nothing changed: the same three jobs, none held, removed or edited; no new one.
        code, after = as_pilot(remote_dir, f"condor_q {where} -allusers -af ClusterId JobPrio")
        assert code == 0 and after.splitlines() == [f"{cluster} 0"] * 3, after
        code, schedds = as_pilot(remote_dir, f"condor_status -pool {collector} -schedd -af Name")
        assert code == 0 and schedds.split() == [f"{name}@{trust}"], schedds
        code, knob = as_pilot(remote_dir, f"condor_config_val {where} -schedd LJ_ATTACK")
        assert "Not defined" in knob, knob

        # The jobs run all the same, with the reduced token.
        final = wait_finished(name, timeout=300, poll=3)
        assert final["jobs"] == {"completed": 3}
        lumberjack("fetch", name)
        imported = last_json(lumberjack("import", name, "--json"))
        assert imported["completed"] == 3
        lumberjack("cleanup", name)
        assert not site_path(remote_dir).exists()
        done = query(f"ClusterId == {cluster}", ["JobStatus", "Managed"])
        assert all(a["JobStatus"] == 4 and "Managed" not in a for a in done), done
    finally:
        stop_at_site(name, remote_dir)
