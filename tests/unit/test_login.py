"""Logins without a site: which carrier a profile gets, what the OpenSSH carrier runs,
and that `sync` opens one connection per site and, at an MFA site without a login,
fails at once with exit 5 (no ssh is even started: the control socket is missing)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import lumberjack.cli.exports_cmd  # noqa: F401  (registers the commands on `cli`)
import lumberjack.cli.login_cmd  # noqa: F401
import lumberjack.cli.steps_cmd  # noqa: F401
from lumberjack.cli import cli
from lumberjack.errors import LoginNeeded
from lumberjack.profiles.request import build_request
from lumberjack.profiles.sites import find_profile
from lumberjack.state import plans, steps, sync
from lumberjack.state.ledger import Ledger
from lumberjack.transport import carrier_for, login
from lumberjack.transport.fabric_carrier import FabricCarrier
from lumberjack.transport.openssh_carrier import OpenSshCarrier


@pytest.fixture(autouse=True)
def testbed_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # -> Path
    """The testbed profiles' key and known_hosts (never used: nothing connects)."""
    site = tmp_path / "testbed" / "site"
    site.mkdir(parents=True)
    (site / "id_ed25519").write_text("not a key\n")
    (site / "known_hosts").write_text("")
    monkeypatch.setenv("LUMBERJACK_TESTBED_DIR", str(tmp_path / "testbed"))
    # short: a control socket's path must fit in 107 bytes, pytest's tmp_path may not
    state = Path(tempfile.mkdtemp(prefix="lj-"))
    monkeypatch.setenv("LUMBERJACK_STATE_DIR", str(state))
    yield site
    shutil.rmtree(state, ignore_errors=True)


def test_each_profile_gets_its_carrier() -> None:
    assert isinstance(carrier_for(find_profile("testbed")), FabricCarrier)
    shared = carrier_for(find_profile("testbed-mfa"))
    assert isinstance(shared, OpenSshCarrier) and not shared.held
    assert shared.path == login.control_dir() / "testbed-mfa"
    held = carrier_for(find_profile("testbed-mfa-nosharing"))
    assert isinstance(held, OpenSshCarrier) and held.held
    assert held.path.name == f"testbed-mfa-nosharing.{os.getpid()}"
    with pytest.raises(LoginNeeded, match="sync --watch"):
        carrier_for(find_profile("testbed-mfa-nosharing"), hold=False)


def test_the_control_directory_is_the_users_alone() -> None:
    directory = login.control_dir()
    os.chmod(directory, 0o755)
    assert login.control_dir() == Path(os.environ["LUMBERJACK_STATE_DIR"]) / "ssh"
    assert directory.stat().st_mode & 0o777 == 0o700


def test_commands_never_prompt_and_pin_the_host_key(testbed_files: Path) -> None:
    carrier = OpenSshCarrier(find_profile("testbed-mfa"))
    argv = carrier._argv("hostname")
    options = {argv[i + 1] for i, word in enumerate(argv) if word == "-o"}
    assert {"BatchMode=yes", "ControlMaster=no", "StrictHostKeyChecking=yes",
            "KbdInteractiveAuthentication=no", "PasswordAuthentication=no",
            f"UserKnownHostsFile={testbed_files / 'known_hosts'}"} <= options  # fmt: skip
    assert argv[argv.index("-S") + 1] == str(carrier.path)
    assert argv[argv.index("-l") + 1] == "hpcuser" and argv[argv.index("-p") + 1] == "2223"
    assert argv[-3:] == ["10.251.0.2", "--", "hostname"]


def test_without_a_login_a_command_fails_at_once() -> None:
    with pytest.raises(LoginNeeded, match="run condor_lumberjack login testbed-mfa$"):
        OpenSshCarrier(find_profile("testbed-mfa")).exec("hostname")
    state = login.state(find_profile("testbed-mfa"))
    assert not state.live and state.describe() == "no login"


def add_launched(ledger: Ledger, name: str, site: str) -> None:
    request = build_request(find_profile(site), nodes=1, cores=1, walltime="10m")
    ledger.create(
        name, site=site, bundle_dir=Path("/nonexistent") / name,
        remote_spool=f"/home/hpcuser/lumberjack/{name}/spool", owner="alice",
        clusters=[7], jobs=["7.0"],
        info={"remote_dir": f"/home/hpcuser/lumberjack/{name}",
              "request": plans.request_info(request)},
    )  # fmt: skip
    for step in ("export", "export", "ship", "launch"):
        ledger.move(name, step)


def test_sync_opens_one_connection_per_site() -> None:
    ledger = Ledger()
    for name in ("a", "b", "c"):
        add_launched(ledger, name, "testbed-mfa")
    add_launched(ledger, "d", "testbed-mfa-nosharing")
    opened: list[str] = []

    def open_site(record):
        opened.append(record.name)
        return steps.site_for(record, hold=False)

    results = sync.sync(ledger, open_site=open_site)
    assert opened == ["a", "d"]
    assert [(r["name"], r["exit_code"]) for r in results] == [
        ("a", 5), ("b", 5), ("c", 5), ("d", 5),
    ]  # fmt: skip
    assert all(r["error"].endswith("run condor_lumberjack login testbed-mfa") for r in results[:3])
    assert "sync --watch" in results[3]["error"]
    assert {ledger.get(name).phase.value for name in "abcd"} == {"launched"}


def test_cli_sync_exits_login_needed_and_login_refuses_a_site_without_sharing() -> None:
    ledger = Ledger()
    add_launched(ledger, "calib", "testbed-mfa")
    runner = CliRunner()
    result = runner.invoke(cli, ["sync", "--json"])
    assert result.exit_code == 5, result.output
    answer = json.loads(result.output)
    assert answer["ok"] is False and answer["exports"][0]["exit_code"] == 5
    listed = runner.invoke(cli, ["exports", "--json"])
    assert json.loads(listed.output)["logins"] == {
        "testbed-mfa": {"auth": "mfa", "connection_sharing": True, "live": False, "until": None}
    }
    refused = runner.invoke(cli, ["login", "testbed-mfa-nosharing"])
    assert refused.exit_code == 2 and "sync --watch" in refused.output
    bad = runner.invoke(cli, ["login", "testbed-mfa", "--persist", "soon"])
    assert bad.exit_code == 2 and "--persist 'soon'" in bad.output
