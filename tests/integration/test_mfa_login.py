"""Logging in as MFA sites demand, on the testbed's MFA sshds (key AND a TOTP code):
one code, then a whole journey and several `sync` runs with no further authentication
(counted in the site's auth log); no login -> exit 5 at once, never a prompt; a wrong
code and an unknown host key refused in one line; where the site allows no connection
sharing, `sync --watch` carries the journey on one connection."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import testbed
from journey import last_json, lumberjack, make_job_dir, stop_at_site, submit, wait_finished

pytestmark = pytest.mark.integration

SITE_BASE = "/home/hpcuser/lumberjack"
ASKPASS = Path(testbed.HERE) / "askpass.py"
LOGIN_NEEDED = 5


@pytest.fixture
def mfa_site(site, monkeypatch: pytest.MonkeyPatch):
    """The site with its MFA sshds (restarted if an older recipe started it); ssh gets
    the code from the testbed's askpass, as a person would type it. Logins are closed
    afterwards."""
    if not site.mfa_ready():
        site.down()
        testbed.up()
    monkeypatch.setenv("SSH_ASKPASS", str(ASKPASS))
    monkeypatch.setenv("SSH_ASKPASS_REQUIRE", "force")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("LUMBERJACK_TESTBED_WRONG_CODE", raising=False)
    site.reset_otp()
    yield site
    for name in ("testbed-mfa", "testbed-mfa-nosharing"):
        lumberjack("logout", name, check=False)


@pytest.fixture
def at_site(mfa_site):
    sent: list[str] = []
    yield sent
    for name in sent:
        stop_at_site(name, f"{SITE_BASE}/{name}")


def authentications(site, port: int) -> int:
    """Logins the site's sshd on `port` accepted so far (each took a code)."""
    log = site.auth_log(port)
    return log.read_text().count("Accepted ") if log.exists() else 0


def prompts(site) -> int:
    """How often ssh asked for something (the askpass log)."""
    log = site.root / "askpass.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def export(cluster: int, site: str, name: str) -> dict:
    return last_json(
        lumberjack(
            "export", "--ids", str(cluster), "--site", site, "--nodes", "1", "--cores", "1",
            "--walltime", "10m", "--name", name, "--json",
        )
    )  # fmt: skip


def sync_until_imported(names: list[str], rounds: int = 60) -> int:
    """Run plain `sync` (as cron would) until every export is imported; how many runs."""
    for done in range(1, rounds + 1):
        answer = last_json(lumberjack("sync", "--json"))
        assert answer["ok"], answer
        phases = {
            e["name"]: e["phase"] for e in last_json(lumberjack("exports", "--json"))["exports"]
        }
        if all(phases[name] == "imported" for name in names):
            return done
        time.sleep(3)
    raise AssertionError(f"not imported after {rounds} syncs: {phases}")


def master_pid(state_dir: Path, site: str) -> int:
    check = subprocess.run(
        ["ssh", "-S", str(state_dir / "ssh" / site), "-O", "check", "x"],
        capture_output=True, text=True,
    )  # fmt: skip
    match = re.search(r"pid=(\d+)", check.stderr)
    assert match, check.stderr
    return int(match.group(1))


def test_one_code_then_a_journey_and_syncs_without_asking(
    workspace: Path, state_dir: Path, mfa_site, at_site: list
) -> None:
    port = 2223
    before, asked = authentications(mfa_site, port), prompts(mfa_site)
    logged_in = last_json(lumberjack("login", "testbed-mfa", "--persist", "1h", "--json"))
    assert logged_in["live"] and logged_in["until"]
    assert authentications(mfa_site, port) == before + 1
    assert prompts(mfa_site) == asked + 1
    listed = last_json(lumberjack("exports", "--json"))
    assert listed["logins"] == {}  # no export yet names a site

    # The whole journey, step by step, each command riding the login.
    job_dir = make_job_dir(workspace)
    cluster = submit(job_dir, 3)
    name = unique("mfa")
    at_site.append(name)
    exported = export(cluster, "testbed-mfa", name)
    assert exported["remote_dir"] == f"{SITE_BASE}/{name}"
    assert last_json(lumberjack("ship", name, "--json"))["phase"] == "shipped"
    assert last_json(lumberjack("launch", name, "--json"))["phase"] == "launched"
    final = wait_finished(name, timeout=300, poll=3)
    assert final["jobs"] == {"completed": 3}
    assert final["login"]["live"] and final["login"]["auth"] == "mfa"
    assert last_json(lumberjack("fetch", name, "--json"))["phase"] == "fetched"
    imported = last_json(lumberjack("import", name, "--json"))
    assert (imported["jobs"], imported["completed"]) == (3, 3)

    # Two more exports at the same site, taken home by plain `sync` runs (cron's way).
    more = []
    for _ in range(2):
        cluster = submit(make_job_dir(workspace, unique("job")), 2)
        more.append(unique("mfa-sync"))
        at_site.append(more[-1])
        export(cluster, "testbed-mfa", more[-1])
    runs = sync_until_imported(more)
    print(f"[mfa] {runs} sync runs took two exports home")
    assert runs >= 2
    listed = last_json(lumberjack("exports", "--json"))
    assert listed["logins"]["testbed-mfa"]["live"] is True
    assert listed["logins"]["testbed-mfa"]["until"] == logged_in["until"]

    # One code for all of it.
    assert authentications(mfa_site, port) == before + 1
    assert prompts(mfa_site) == asked + 1

    # The login gone (its master killed): sync fails at once with its own code, asks
    # nobody and tries no login at the site.
    waiting = unique("mfa-wait")
    export(submit(make_job_dir(workspace, unique("job")), 1), "testbed-mfa", waiting)
    os.kill(master_pid(state_dir, "testbed-mfa"), signal.SIGKILL)
    started = time.monotonic()
    result = lumberjack("sync", check=False)
    took = time.monotonic() - started
    print(f"[mfa] sync without a login failed in {took:.2f} s")
    assert result.returncode == LOGIN_NEEDED, result.stderr
    assert "run condor_lumberjack login testbed-mfa" in result.stdout
    assert took < 30  # a hang guard, not a measurement
    assert prompts(mfa_site) == asked + 1
    assert authentications(mfa_site, port) == before + 1
    listed = last_json(lumberjack("exports", "--json"))
    assert listed["logins"]["testbed-mfa"]["live"] is False
    lumberjack("unexport", waiting)


def test_wrong_code_and_unknown_host_key_refused_in_one_line(
    state_dir: Path, mfa_site, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    port = 2223
    before = authentications(mfa_site, port)
    monkeypatch.setenv("LUMBERJACK_TESTBED_WRONG_CODE", "1")
    result = lumberjack("login", "testbed-mfa", check=False)
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused the login" in lines[0], lines
    assert "run condor_lumberjack login testbed-mfa again" in lines[0]
    assert authentications(mfa_site, port) == before
    monkeypatch.delenv("LUMBERJACK_TESTBED_WRONG_CODE")

    # A profile whose known_hosts does not hold the site's key: refused before any code.
    asked = prompts(mfa_site)
    shipped = Path(__file__).resolve().parents[2] / "site-profiles" / "testbed-mfa.toml"
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (tmp_path / "empty_known_hosts").write_text("")
    text = re.sub(
        r'(?m)^known_hosts = ".*"$',
        f'known_hosts = "{tmp_path / "empty_known_hosts"}"',
        shipped.read_text(),
    )
    (profiles / "testbed-mfa.toml").write_text(text)
    monkeypatch.setenv("LUMBERJACK_SITE_PROFILES", str(profiles))
    result = lumberjack("login", "testbed-mfa", check=False)
    assert result.returncode == 7, result.stderr  # a setup mistake: no retry mends it
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not in" in lines[0] and "ssh-keyscan" in lines[0], lines
    assert prompts(mfa_site) == asked
    assert authentications(mfa_site, port) == before


def test_no_sharing_site_watch_carries_a_journey_on_one_connection(
    workspace: Path, state_dir: Path, mfa_site, at_site: list
) -> None:
    port = 2224
    refused = lumberjack("login", "testbed-mfa-nosharing", check=False)
    assert refused.returncode == 2 and "sync --watch" in refused.stderr, refused.stderr

    cluster = submit(make_job_dir(workspace), 3)
    name = unique("watch")
    at_site.append(name)
    before = authentications(mfa_site, port)
    export(cluster, "testbed-mfa-nosharing", name)  # holds its own connection: one code
    assert authentications(mfa_site, port) == before + 1

    # cron's sync: says what to do instead of trying
    plain = lumberjack("sync", check=False)
    assert plain.returncode == LOGIN_NEEDED, plain.stderr
    assert "sync --watch" in plain.stdout
    assert authentications(mfa_site, port) == before + 1

    mfa_site.reset_otp()  # the next code may fall in the same 30 s step
    watch = lumberjack("sync", "--watch", "--poll", "2", "--json", check=False)
    assert watch.returncode == 0, watch.stderr or watch.stdout
    rounds = [line for line in watch.stdout.splitlines() if line.startswith("{")]
    assert len(rounds) >= 2
    assert authentications(mfa_site, port) == before + 2  # the whole watch: one code
    record = next(
        e for e in last_json(lumberjack("exports", "--json"))["exports"] if e["name"] == name
    )
    assert record["phase"] == "imported"
    print(f"[watch] {len(rounds)} rounds on one connection")
