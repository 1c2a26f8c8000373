"""Two local owners at one site account: alice and bob export to the testbed site at the
same time, and bob's job goes after alice's export with everything the site account
could reach (its environment too: a library and a Python hook it ships, that every
program started with that environment would load outside its container): her export
directory and inputs, her pool's signing key, the pilots' token, her job's spool
directory (a file written there would come home as hers), other processes' roots. Every
attempt must fail, from inside bob's job; alice's outputs come back whole and exactly
hers. And the pilots' token lives for the walltime and a short margin, read from the
token itself."""

from __future__ import annotations

import base64
import json
import os
import shlex
import stat
import subprocess
import uuid
from pathlib import Path

import pytest
import testbed
from journey import (
    SITE_BASE,
    as_submitter,
    expected_outputs,
    last_json,
    lumberjack,
    make_job_dir,
    site_path,
    site_run,
    submit,
    submit_as,
    tree,
    wait_finished,
)

from lumberjack.profiles.sites import find_profile
from lumberjack.state import plans

pytestmark = pytest.mark.integration

#: Bob's job: $1 is alice's export directory at the site, $2 her cluster. One line per
#: attempt, LEAK when it worked; the last line says the probe ran to its end.
PROBE = r"""#!/bin/sh
victim=$1
spooldir="$victim/spool/$2/0/cluster$2.proc0.subproc0"
echo "probe in $(pwd) as $(id -u)"
for d in "$victim" "$victim/bundle" "$victim/spool" "$victim/pool/local/passwords.d" \
         "$victim/pilots/tokens.d" "$spooldir"; do
    if ls "$d" >/dev/null 2>&1; then echo "LEAK list $d"; else echo "denied list $d"; fi
done
# HTCondor binds the job's own sandbox at its path too: the base directory may exist
# in the container, holding nothing but the way to this job's sandbox.
if [ -e "$victim" ]; then echo "LEAK exists $victim"; else echo "denied exists $victim"; fi
for f in "$victim/pool/local/passwords.d/POOL" "$victim/pilots/tokens.d/pilot" \
         "$victim/pool/condor_config" "$victim/launch.json"; do
    if cat "$f" >/dev/null 2>&1; then echo "LEAK read $f"; else echo "denied read $f"; fi
done
skip='( -path /proc -o -path /sys -o -path /dev ) -prune -o'
# shellcheck disable=SC2086
found=$(find / $skip -name 'in put.txt' -print 2>/dev/null | while read -r f; do
    grep -l "alice's secret input" "$f"; done | head -n 3)
if [ -n "$found" ]; then echo "LEAK inputs $found"; else echo "denied inputs"; fi
# shellcheck disable=SC2086
found=$(find / $skip -name POOL -path '*passwords.d*' -print 2>/dev/null | head -n 3)
if [ -n "$found" ]; then echo "LEAK keys $found"; else echo "denied keys"; fi
if (echo "written by bob" > "$spooldir/result.txt") 2>/dev/null; then
    echo "LEAK wrote $spooldir/result.txt"
else
    echo "denied write $spooldir"
fi
for p in /proc/[0-9]*; do
    if cat "$p/root$victim/pool/local/passwords.d/POOL" >/dev/null 2>&1; then
        echo "LEAK key via $p/root"
    fi
done
echo "processes seen: $(find /proc -maxdepth 1 -name '[0-9]*' | wc -l)"
# The site account's home: its keys and the way in.
for f in /home/hpcuser/.ssh/authorized_keys /home/hpcuser/.ssh; do
    if ls "$f" >/dev/null 2>&1; then echo "LEAK home $f"; else echo "denied home $f"; fi
done
if (echo planted > /home/hpcuser/.ssh/planted) 2>/dev/null; then echo "LEAK home write"; else
    echo "denied home write"; fi
# HTCondor's own channels: Chirp (the shadow reads and writes for the job), the pool's
# daemons over the network (alice's collector at $3), condor_ssh_to_job.
if condor_chirp fetch "$victim/pool/local/passwords.d/POOL" stolen >/dev/null 2>&1 \
    && [ -s stolen ]; then echo "LEAK chirp fetch"; else echo "denied chirp fetch"; fi
if condor_chirp put bob.txt "$spooldir/result.txt" >/dev/null 2>&1; then
    echo "LEAK chirp put"; else echo "denied chirp put"; fi
if condor_chirp set_job_attr Owner '"alice"' >/dev/null 2>&1; then
    echo "LEAK chirp set_job_attr"; else echo "denied chirp set_job_attr"; fi
if [ -n "$(condor_status -pool "$3" -any -af Name 2>/dev/null)" ]; then
    echo "LEAK collector $3"; else echo "denied collector $3"; fi
if condor_q -pool "$3" -global -af ClusterId 2>/dev/null | grep -q .; then
    echo "LEAK schedd via $3"; else echo "denied schedd via $3"; fi
if timeout 20 condor_ssh_to_job -pool "$3" -auto-retry "$2.0" true >/dev/null 2>&1 </dev/null
    then echo "LEAK ssh_to_job"; else echo "denied ssh_to_job"; fi
env | grep -E 'SEC_TOKEN|CONDOR_CONFIG|passwords\.d|tokens\.d' | sed 's/^/LEAK env /'
# The job's environment (LD_PRELOAD=hook.so, PYTHONPATH=. with sitecustomize.py): each
# program that loaded them left a marker here, named inside or OUTSIDE its container.
python3 -c pass
for f in escaped-*; do
    case $f in *OUTSIDE*) echo "LEAK $f" ;; escaped-\*) ;; *) echo "marker $f" ;; esac
done
echo "bob's own result" > bob.txt
echo "probe done"
"""


SECRETS = ("pool/local/passwords.d/POOL", "pilots/tokens.d/pilot")

#: Code that bob's job's environment makes every program load: a library (LD_PRELOAD)
#: and a Python hook (PYTHONPATH=.); each leaves a marker in the job's scratch directory,
#: named after its program and whether it ran in the job's container (cwd /srv).
HOOK_C = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    char cwd[4096] = "", exe[4096] = "", path[8192];
    const char *dir = getenv("_CONDOR_SCRATCH_DIR");
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) exe[n] = 0;
    if (!getcwd(cwd, sizeof cwd) || !dir) return;
    const char *base = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
    snprintf(path, sizeof path, "%s/escaped-ld-%s-%s", dir,
             strncmp(cwd, "/srv", 4) ? "OUTSIDE" : "inside", base);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
}
"""
SITECUSTOMIZE = """import os, sys
where = "inside" if os.getcwd().startswith("/srv") else "OUTSIDE"
name = os.path.basename(sys.executable)
scratch = os.environ.get("_CONDOR_SCRATCH_DIR", ".")
open(os.path.join(scratch, f"escaped-py-{where}-{name}"), "w").close()
"""


def plant_hooks(job_dir: Path) -> str:
    """hook.so and sitecustomize.py in bob's job directory; the environment that loads them."""
    source = job_dir / "hook.c"
    source.write_text(HOOK_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(job_dir / "hook.so"), str(source)],
                   check=True)  # fmt: skip
    (job_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
    for name in ("hook.c", "hook.so", "sitecustomize.py"):
        os.chown(job_dir / name, testbed.OTHER_SUBMITTER_UID, testbed.OTHER_SUBMITTER_UID)
    return "LD_PRELOAD=./hook.so PYTHONPATH=. PYTHONSTARTUP=sitecustomize.py PATH=.:/usr/bin:/bin"


def with_pilot_token(remote_dir: str, command: str) -> tuple[int, str]:
    """`command` in the site image with export remote_dir's pilot config and token only."""
    image = find_profile("testbed").container.image
    node = "LJ_NODE_DIR=/tmp LJ_NODE_ID=intruder LJ_CPUS=1 LJ_MEMORY_MB=64 LJ_PILOT_ID=0"
    out = site_run(
        f"apptainer -s exec --bind {remote_dir} {image} env "
        f"CONDOR_CONFIG={remote_dir}/pilots/condor_config {node} LJ_RETIRE_TIME=0 "
        f'_CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS=IDTOKENS {command} 2>&1; echo "exit=$?"',
        check=False,
    )
    body, _, code = out.rstrip().rpartition("exit=")
    return int(code), body.strip()


def collector_of(remote_dir: str) -> str:
    state = json.loads(site_path(remote_dir).joinpath("pool", "state.json").read_text())
    return f"{state['address']}:{state['port']}"


def invalidate_with(holder: str, target: str) -> tuple[int, str]:
    """INVALIDATE_STARTD_ADS for every slot of target's pool, with holder's pilot token."""
    ad = f"{holder}/pilots/invalidate.ad"
    site_run(
        f'printf \'MyType = "Query"\\nTargetType = "Machine"\\nRequirements = true\\n\' > {ad}'
    )
    return with_pilot_token(
        holder, f"condor_advertise -tcp -pool {collector_of(target)} INVALIDATE_STARTD_ADS {ad}"
    )


def startds_of(remote_dir: str) -> list[str]:
    code, names = with_pilot_token(
        remote_dir, f"condor_status -pool {collector_of(remote_dir)} -startd -af Name"
    )
    assert code == 0, names
    return names.split()


#: What a daemon of one export reaches at the site: $1 another export's directory.
DAEMON_VIEW = r"""victim=$1
for d in "$victim" "$victim/pool/local/passwords.d" /home/hpcuser/.ssh; do
    if ls "$d" >/dev/null 2>&1; then echo "LEAK list $d"; else echo "denied list $d"; fi
done
if cat "$victim/pool/local/passwords.d/POOL" >/dev/null 2>&1; then echo "LEAK read key"
else echo "denied read key"; fi
roots=0
for p in /proc/[0-9]*; do
    if cat "$p/root$victim/pool/local/passwords.d/POOL" >/dev/null 2>&1; then roots=1; fi
done
if [ "$roots" = 1 ]; then echo "LEAK key via /proc/PID/root"; else echo "denied /proc roots"; fi
found=$(find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o -name POOL -print \
    2>/dev/null | grep -v "^$2/" | head -n 3)
if [ -n "$found" ]; then echo "LEAK keys $found"; else echo "denied keys"; fi
if [ "$(find /proc -maxdepth 1 -name '[0-9]*' | wc -l)" -lt 50 ]; then echo "denied processes"
else echo "LEAK processes"; fi
"""


def daemon_views(own: str, victim: str) -> dict[str, str]:
    """DAEMON_VIEW run where an export's daemons run: in its pool's instance (schedd,
    shadow) and in a container started as its pilots start their startds."""
    from lumberjack.site.runtime import Apptainer

    script = shlex.quote(DAEMON_VIEW)
    image = find_profile("testbed").container.image
    pilot = Apptainer(root=own, image=image).wrap(
        f"{own}/pilots/condor_config", "sh", "-c", script, "view", victim, own
    )
    pool = f"apptainer -s exec instance://lumberjack-{Path(own).name} sh -c {script} view"
    return {
        "pool": site_run(f"{pool} {victim} {own}", check=False),
        "pilot": site_run(pilot, check=False),
    }


def claims_of(token_path: Path) -> dict:
    payload = token_path.read_text().strip().split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_bobs_job_cannot_reach_alices_export(workspace: Path, state_dir: Path, at_site) -> None:
    alice_dir = make_job_dir(workspace, "alice")
    (alice_dir / "in put.txt").write_text("alice's secret input\n")
    bob_home = workspace / "bob"
    bob_home.mkdir()
    bob_dir = make_job_dir(bob_home, "job", uid=testbed.OTHER_SUBMITTER_UID)
    (bob_dir / "probe.sh").write_text(PROBE)
    (bob_dir / "probe.sh").chmod(0o755)
    for path in (bob_home, bob_dir / "probe.sh"):
        os.chown(path, testbed.OTHER_SUBMITTER_UID, testbed.OTHER_SUBMITTER_UID)

    tag = uuid.uuid4().hex[:6]
    alice_name, bob_name = f"iso-alice-{tag}", f"iso-bob-{tag}"
    at_site.extend([alice_name, bob_name])
    victim = f"{SITE_BASE}/{alice_name}"
    request = ("--site", "testbed", "--nodes", "1", "--cores", "1", "--walltime", "20m")

    # alice: one job that runs long enough for bob's to run beside it.
    alice_cluster = submit(alice_dir, 1, arguments="$(Process) 0 100")
    exported = last_json(
        lumberjack("export", "--ids", str(alice_cluster), *request, "--name", alice_name,
                   "--json")
    )  # fmt: skip
    assert exported["remote_dir"] == victim
    lumberjack("ship", alice_name)
    lumberjack("launch", alice_name)

    bob_cluster = submit_as(
        testbed.OTHER_SUBMITTER, bob_dir, 1, executable=str(bob_dir / "probe.sh"),
        arguments=f"{victim} {alice_cluster} {collector_of(victim)}",
        transfer_output_files="bob.txt", transfer_output_remaps='""',
        transfer_input_files="hook.so, sitecustomize.py",
        environment=f'"{plant_hooks(bob_dir)}"',
    )  # fmt: skip
    with as_submitter(testbed.OTHER_SUBMITTER):
        lumberjack("export", "--ids", str(bob_cluster), *request, "--name", bob_name)
        lumberjack("ship", bob_name)
        lumberjack("launch", bob_name)
        # What bob's schedd and shadow (his pool's instance) and his startd and starter (a
        # container as his pilots start it) reach, whatever a job makes them do.
        views = daemon_views(f"{SITE_BASE}/{bob_name}", victim)
        wait_finished(bob_name, timeout=300)
        # alice's job ran beside bob's (it sleeps 100 s).
        print("alice:", last_json(lumberjack("status", alice_name, "--json"))["jobs"])
        # alice's pilots' token means nothing to bob's pool: it cannot invalidate its slots.
        invalidated = invalidate_with(victim, f"{SITE_BASE}/{bob_name}")
        print("invalidate with alice's token:", invalidated)
        bob_startds = startds_of(f"{SITE_BASE}/{bob_name}")
        lumberjack("fetch", bob_name)
        bob_imported = last_json(lumberjack("import", bob_name, "--json"))
    probe = (bob_dir / "out.0").read_text()
    print(probe)

    root = site_path(victim)
    modes = {s: stat.S_IMODE((root / s).stat().st_mode) for s in SECRETS}
    claims = claims_of(root / "pilots" / "tokens.d" / "pilot")
    final = wait_finished(alice_name, timeout=300)
    lumberjack("fetch", alice_name)
    alice_imported = last_json(lumberjack("import", alice_name, "--json"))

    # Bob's job ran to its end, and every attempt failed.
    assert bob_imported["completed"] == 1, bob_imported
    assert probe.rstrip().endswith("probe done"), probe
    assert (bob_dir / "bob.txt").read_text() == "bob's own result\n"
    assert [line for line in probe.splitlines() if "LEAK" in line] == []
    # The hooks did load, in the job's own programs: the job's environment reached the
    # job, and no program outside its container.
    assert "marker escaped-ld-inside-" in probe and "marker escaped-py-inside-" in probe, probe
    assert probe.count("denied") >= 23, probe
    for who, seen in views.items():
        assert [line for line in seen.splitlines() if "LEAK" in line] == [], (who, seen)
        assert seen.count("denied") == 7, (who, seen)
    assert int(probe.split("processes seen: ")[1].split()[0]) < 10, probe  # its own PIDs
    assert invalidated[0] != 0, invalidated
    assert bob_startds, "bob's startd lost its ad"

    # The pool's secrets are the site account's alone; the pilots' token lives for the
    # walltime and a short margin, not days.
    assert modes == {s: 0o600 for s in SECRETS}
    assert claims["exp"] - claims["iat"] == 20 * 60 + plans.PILOT_TOKEN_MARGIN_S
    assert plans.PILOT_TOKEN_MARGIN_S <= 3600

    # alice's outputs: whole, exactly hers, nothing of bob's.
    assert final["jobs"] == {"completed": 1}
    assert alice_imported["completed"] == 1, alice_imported
    expected = expected_outputs(alice_dir, range(1))
    assert {k: v for k, v in tree(alice_dir).items() if k in expected} == expected
    assert b"written by bob" not in b"".join(tree(alice_dir).values())
    for path in alice_dir.rglob("*"):
        assert path.stat().st_uid == testbed.SUBMITTER_UID, path
    for name in (alice_name, bob_name):
        lumberjack("cleanup", name)


def test_no_container_means_one_owner_at_a_time(workspace: Path, state_dir: Path, at_site) -> None:
    """testbed-nocontainer runs jobs beside the startd, as the site account: while one of
    alice's exports is at the site, bob's is not shipped, and hers is not launched while
    his is, unless the operator says the account is shared (--shared-account)."""
    alice_dir = make_job_dir(workspace, "alice")
    bob_home = workspace / "bob"
    bob_home.mkdir()
    os.chown(bob_home, testbed.OTHER_SUBMITTER_UID, testbed.OTHER_SUBMITTER_UID)
    bob_dir = make_job_dir(bob_home, "job", uid=testbed.OTHER_SUBMITTER_UID)
    tag = uuid.uuid4().hex[:6]
    alice_name, bob_name = f"one-alice-{tag}", f"one-bob-{tag}"
    at_site.extend([alice_name, bob_name])
    request = ("--site", "testbed-nocontainer", "--nodes", "1", "--walltime", "10m")

    alice_cluster = submit(alice_dir, 1)
    lumberjack("export", "--ids", str(alice_cluster), *request, "--name", alice_name)
    lumberjack("ship", alice_name)
    bob_cluster = submit_as(testbed.OTHER_SUBMITTER, bob_dir, 1)
    with as_submitter(testbed.OTHER_SUBMITTER):
        lumberjack("export", "--ids", str(bob_cluster), *request, "--name", bob_name)
        refused = lumberjack("ship", bob_name, check=False)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        message = refused.stderr.strip()
        assert len(message.splitlines()) == 1, message
        assert f"export {alice_name} of alice is there (shipped)" in message
        assert "shared_account" in message
        # The operator says the account is shared on purpose: bob's bundle goes.
        lumberjack("ship", bob_name, "--shared-account")
    # alice said no such thing: her launch beside bob's shipped export is refused.
    refused = lumberjack("launch", alice_name, check=False)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"export {bob_name} of bob is there (shipped)" in refused.stderr
    check = last_json(lumberjack("sites", "check", "testbed-nocontainer", "--json"))
    assert check["isolation"] == "one-owner"
    with as_submitter(testbed.OTHER_SUBMITTER):
        lumberjack("unexport", bob_name)
    lumberjack("unexport", alice_name)


def refused_in_one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1, message
    return message


def sync_error(name: str) -> dict:
    """cron's path, `sync --name NAME --json`: this export's entry, which must be an error."""
    result = lumberjack("sync", "--name", name, "--json", check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    entry = json.loads(result.stdout)["exports"][0]
    assert len(entry["error"].splitlines()) == 1, entry
    return entry


def test_one_site_account_whatever_the_profiles_name(
    workspace: Path, state_dir: Path, at_site
) -> None:
    """testbed (apptainer) and testbed-nocontainer are two names of one site account:
    hpcuser on the same login host, the same base_dir. Root for both owners: while
    alice's export is there by testbed, bob's by testbed-nocontainer is not shipped (by
    `ship` and by cron's `sync`), and while his is there, hers is not: his jobs, with no
    container, would read her files."""
    alice_dir = make_job_dir(workspace, "alice")
    bob_home = workspace / "bob"
    bob_home.mkdir()
    os.chown(bob_home, testbed.OTHER_SUBMITTER_UID, testbed.OTHER_SUBMITTER_UID)
    bob_dir = make_job_dir(bob_home, "job", uid=testbed.OTHER_SUBMITTER_UID)
    tag = uuid.uuid4().hex[:6]
    alice_name, bob_name, alice_next = f"acct-alice-{tag}", f"acct-bob-{tag}", f"acct-al2-{tag}"
    at_site.extend([alice_name, bob_name, alice_next])
    account = "hpcuser@10.251.0.2"
    sized = ("--nodes", "1", "--walltime", "10m")

    alice_cluster = submit(alice_dir, 1)
    lumberjack("export", "--ids", str(alice_cluster), "--site", "testbed", *sized,
               "--name", alice_name)  # fmt: skip
    lumberjack("ship", alice_name)
    bob_cluster = submit_as(testbed.OTHER_SUBMITTER, bob_dir, 1)
    with as_submitter(testbed.OTHER_SUBMITTER):
        lumberjack("export", "--ids", str(bob_cluster), "--site", "testbed-nocontainer",
                   *sized, "--name", bob_name)  # fmt: skip
        message = refused_in_one_line(lumberjack("ship", bob_name, check=False))
        assert (
            f"export {alice_name} of alice is there (shipped) on the same site account "
            f"{account} (site testbed)"
        ) in message, message
        assert "runtime none" in message and "shared_account" in message
        entry = sync_error(bob_name)
        assert f"export {alice_name} of alice is there" in entry["error"], entry
    # Nothing changed: bob's export waits here, nothing of it at the site.
    assert last_json(lumberjack("status", bob_name, "--json"))["phase"] == "exported"
    assert not site_path(f"{SITE_BASE}/{bob_name}").exists()

    # The other way round: bob's uncontained export there, alice's contained one waits.
    lumberjack("unexport", alice_name)
    lumberjack("cleanup", alice_name)
    with as_submitter(testbed.OTHER_SUBMITTER):
        lumberjack("ship", bob_name)
    lumberjack("export", "--ids", str(alice_cluster), "--site", "testbed", *sized,
               "--name", alice_next)  # fmt: skip
    entry = sync_error(alice_next)
    assert entry["phase"] == "exported", entry
    assert (
        f"export {bob_name} of bob is there (shipped) on the same site account {account} "
        "(site testbed-nocontainer), and its jobs get no container"
    ) in entry["error"], entry
    message = refused_in_one_line(lumberjack("ship", alice_next, check=False))
    assert f"export {bob_name} of bob is there" in message, message
    assert not site_path(f"{SITE_BASE}/{alice_next}").exists()
    with as_submitter(testbed.OTHER_SUBMITTER):
        lumberjack("unexport", bob_name)
    lumberjack("unexport", alice_next)
