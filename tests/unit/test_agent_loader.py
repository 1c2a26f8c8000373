"""What runs on the login node: every python3 command line isolated (-I), and the site
agent run only as the access point built it (core/agent_loader.py, run for real here
with a local python3 on files in a temporary directory, through `bash -c` as a login
shell runs the command line lumberjack sends)."""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import load_fixture_module

from lumberjack.ap.agent_zipapp import agent_command, agent_digest, build_agent, shipped_agent
from lumberjack.core import agent_loader, crashpoints
from lumberjack.core.contract import ExportLayout
from lumberjack.core.site_python import PYTHON3
from lumberjack.errors import SetupError
from lumberjack.site.pools import allocation
from lumberjack.state import lifecycle
from lumberjack.state.ledger import Ledger
from lumberjack.transport.helper import helper_command

fake = load_fixture_module("fake_site")
site_bundle = load_fixture_module("site_bundle")

#: An interpreter outside any virtualenv (a venv turns the user site off by itself),
#: as `python3` on a login node is.
BASE_PYTHON = Path(sys.base_prefix) / "bin" / "python3"


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "state")


@pytest.fixture
def login(tmp_path: Path) -> dict[str, str]:
    """A login's environment at a site account a job wrote to: `python3` on PATH is a
    plain interpreter; HOME holds a user site with a .pth file, PYTHONPATH a
    sitecustomize, and the current directory (the login's home) a module named like
    one the loader imports; each, if it ran, would leave a file named after it."""
    if not BASE_PYTHON.exists():
        pytest.skip(f"no plain interpreter at {BASE_PYTHON}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(BASE_PYTHON)
    home = tmp_path / "home"
    user_site = subprocess.run(
        [str(BASE_PYTHON), "-c", "import site; print(site.getusersitepackages())"],
        env={"HOME": str(home), "PYTHONUSERBASE": str(home / ".local")},
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(user_site).mkdir(parents=True)
    planted = tmp_path / "planted"
    planted.mkdir()
    mark = "import pathlib; pathlib.Path({!r}).touch()"
    Path(user_site, "evil.pth").write_text(mark.format(str(planted / "pth")) + "\n")
    python_path = tmp_path / "pythonpath"
    python_path.mkdir()
    (python_path / "sitecustomize.py").write_text(mark.format(str(planted / "sitecustomize")))
    for name in ("hashlib", "runpy", "zlib"):  # what the loader's first lines import
        (home / f"{name}.py").write_text(mark.format(str(planted / f"cwd-{name}")))
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home),
        "PYTHONUSERBASE": str(home / ".local"), "PYTHONPATH": str(python_path),
        "PLANTED": str(planted),
    }  # fmt: skip


def run_line(line: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    """`line` as the site's login shell runs it: `bash -c`, in the account's home."""
    return subprocess.run(
        ["bash", "-c", line], env=env, cwd=env["HOME"], input=stdin, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


def planted(env: dict[str, str]) -> list[str]:
    return sorted(os.listdir(env["PLANTED"]))


def zipapp(main: str, **modules: str) -> bytes:
    """A small zipapp: `__main__.py` and modules of a package `pkg`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("__main__.py", main)
        archive.writestr("pkg/__init__.py", "")
        for name, source in modules.items():
            archive.writestr(f"pkg/{name}.py", source)
    return buffer.getvalue()


# ---- every python3 the access point starts at the site is isolated ----------------------


def test_every_python_command_line_is_isolated() -> None:
    assert PYTHON3 == ("python3", "-I")
    lines = [
        helper_command("scan", "/a/b"),
        agent_command("/a/.lumberjack/x.pyz", "0" * 64, "status", "/a/b"),
    ]
    for line in lines:
        assert "\n" not in line and shlex.split(line)[:3] == ["python3", "-I", "-c"]
    for script in (allocation._ROUTE_ADDRESS, allocation._FREE_PORT):  # node scripts
        assert script.startswith("python3 -I -c ")


def test_the_agent_lives_outside_every_export_and_lease_directory() -> None:
    sha = "a" * 64
    for root in ("/home/u/lj/calib", "/home/u/lj/lease-calib"):
        path = ExportLayout(root).agent_file(sha)
        assert path == f"/home/u/lj/.lumberjack/agent-{sha}.pyz"
        assert not path.startswith(root + "/")


def test_the_site_is_asked_only_through_isolated_python(ledger: Ledger, tmp_path: Path) -> None:
    record, site, _ = fake.exported(ledger, tmp_path, site_bundle)
    lifecycle.ship(ledger, site, record)
    lifecycle.launch(ledger, site, ledger.get("calib"))
    lifecycle.refresh_status(ledger, site, ledger.get("calib"))
    pythons = [c for c in site.connection.commands if "python" in c.split()[0]]
    assert pythons and all(c.startswith("python3 -I -c ") for c in pythons)


# ---- the loader: exactly the agent the access point built, or nothing -------------------


def test_the_loader_runs_the_exact_agent_refuses_a_tampered_one(
    login: dict[str, str], tmp_path: Path
) -> None:
    data = build_agent()
    path = tmp_path / "agent.pyz"
    path.write_bytes(data)
    line = agent_command(str(path), agent_digest(data), "--help")
    exact = run_line(line, login)
    assert exact.returncode == 0, exact.stderr
    assert "usage: agent.pyz" in exact.stdout
    # tampered: one byte of the archive's comment region changed
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    tampered = run_line(line, login)
    assert tampered.returncode == agent_loader.ALTERED and tampered.stdout == ""
    assert tampered.stderr.count("\n") == 1 and "refusing to run" in tampered.stderr
    path.unlink()
    missing = run_line(line, login)
    assert missing.returncode == agent_loader.MISSING and "no agent at" in missing.stderr
    assert planted(login) == []


def test_an_agent_swapped_between_two_runs_is_refused_and_never_runs(
    login: dict[str, str], tmp_path: Path
) -> None:
    ran = tmp_path / "shim-ran"
    good = zipapp("import sys; print('good', sys.argv[1:])")
    shim = zipapp(f"import pathlib; pathlib.Path({str(ran)!r}).touch()")
    path = tmp_path / "agent.pyz"
    path.write_bytes(good)
    line = agent_command(str(path), agent_digest(good), "status", "/x")
    first = run_line(line, login)
    assert (first.returncode, first.stdout) == (0, "good ['status', '/x']\n"), first.stderr
    path.write_bytes(shim)  # what a job that escaped its container would do
    second = run_line(line, login)
    assert second.returncode == agent_loader.ALTERED and "refusing to run" in second.stderr
    assert not ran.exists()


def test_the_loader_runs_the_bytes_it_checked_not_the_file_after(
    login: dict[str, str], tmp_path: Path
) -> None:
    """The agent imports its modules as it needs them: from the checked copy in memory,
    even when the file is replaced after the check (here by the agent itself), and that
    copy is sealed: not even the account can write to it."""
    path = tmp_path / "agent.pyz"
    main = (
        "import sys, pathlib\n"
        "pathlib.Path(sys.argv[1]).write_bytes(b'not a zip')\n"
        "try:\n"
        "    pathlib.Path(sys.argv[0]).write_bytes(b'not a zip')\n"
        "except PermissionError:\n"
        "    print('sealed')\n"
        "from pkg import late\n"
        "print(late.WORD, late.__file__.startswith('/proc/self/fd/'))\n"
    )
    data = zipapp(main, late="WORD = 'checked'")
    path.write_bytes(data)
    result = run_line(agent_command(str(path), agent_digest(data), str(path)), login)
    assert (result.returncode, result.stdout) == (0, "sealed\nchecked True\n"), result.stderr
    assert path.read_bytes() == b"not a zip"


def test_nothing_planted_on_the_account_runs_with_lumberjacks_python(
    login: dict[str, str], tmp_path: Path
) -> None:
    """A .pth in the user site, a sitecustomize on PYTHONPATH and modules in the login's
    home run with a plain `python3` (the control), never under the command lines sent."""
    control = run_line("python3 -c 'import hashlib, runpy, zlib'", login)
    assert control.returncode == 0, control.stderr
    assert {"pth", "sitecustomize", "cwd-hashlib"} <= set(planted(login)), planted(login)
    for name in planted(login):
        os.unlink(os.path.join(login["PLANTED"], name))
    data = shipped_agent().data
    path = tmp_path / "agent.pyz"
    path.write_bytes(data)
    agent = run_line(agent_command(str(path), agent_digest(data), "--help"), login)
    assert agent.returncode == 0, agent.stderr
    (tmp_path / "tree").mkdir()
    helper = run_line(helper_command("scan", str(tmp_path / "tree")), login, stdin="{}")
    assert helper.returncode == 0, helper.stderr
    assert planted(login) == []


def test_the_crash_point_variable_reaches_the_agent(login: dict[str, str], tmp_path: Path) -> None:
    data = zipapp(f"import os; print(os.environ.get({crashpoints.ENV!r}))")
    path = tmp_path / "agent.pyz"
    path.write_bytes(data)
    line = f"{crashpoints.ENV}=launch.after-pool " + agent_command(str(path), agent_digest(data))
    result = run_line(line, login)
    assert (result.returncode, result.stdout) == (0, "launch.after-pool\n"), result.stderr


# ---- the access point: ship what is missing, refuse what was changed --------------------


def test_a_missing_agent_is_shipped_and_an_altered_one_refused(
    ledger: Ledger, tmp_path: Path
) -> None:
    record, site, _ = fake.exported(ledger, tmp_path, site_bundle)
    lifecycle.ship(ledger, site, record)
    lifecycle.launch(ledger, site, ledger.get("calib"))
    files = site.connection.files
    path = ExportLayout("/home/hpcuser/lj/calib").agent_file(shipped_agent().sha256)
    assert files[path] == shipped_agent().data
    del files[path]  # a site whose agent is gone (or a new lumberjack): shipped again
    lifecycle.refresh_status(ledger, site, ledger.get("calib"))
    assert files[path] == shipped_agent().data
    files[path] = b"a shim"
    site.connection.commands.clear()
    with pytest.raises(SetupError, match="refusing.*nothing was run"):
        lifecycle.refresh_status(ledger, site, ledger.get("calib"))
    assert files[path] == b"a shim"  # left for a person to look at, not replaced
    assert len(site.connection.commands) == 1
