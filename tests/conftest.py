"""Shared fixtures: the real testbed (HTCondor pools on loopback) for integration tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "containers" / "testbed"))

import testbed  # noqa: E402

# The shipped testbed profiles are found only where the testbed is configured (as it is
# for every test here); a test of a user's view unsets it.
os.environ.setdefault("LUMBERJACK_TESTBED_DIR", str(testbed.testbed_dir()))


def pytest_configure(config: pytest.Config) -> None:
    # pytest-docker's fixtures live for the session by default: in `make test` that would
    # keep the engine and both pools up through the integration tests that run after.
    # Set here, in the first conftest: pytest-docker's scopes are fixed when it registers,
    # before tests/docker/conftest.py is read in a run of the whole tree.
    config.option.container_scope = "module"


def load_fixture_module(name: str):  # -> module
    """A helper module from tests/unit/fixtures/ (`name`, or `batch/name` below it),
    loaded once by path: the fixtures are scripts too (`make lint` runs one), not a
    package. The one loader every test uses."""
    import importlib.util

    full = "lumberjack_test_" + name.replace("/", "_")
    if full not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            full, ROOT / "tests" / "unit" / "fixtures" / f"{name}.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
    return sys.modules[full]


def pytest_report_header(config: pytest.Config) -> list[str]:
    link = testbed.testbed_dir() / "rootfs"
    if link.exists():
        versions = testbed.installed_versions(link.resolve())
        return ["testbed: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))]
    return ["testbed: not built yet"]


@pytest.fixture(scope="session")
def access_point() -> testbed.Pool:
    """The access-point pool, started once per session (and stopped if we started it)."""
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (namespaces, pivot_root)")
    was_running = testbed.ACCESS_POINT.is_running()
    site_was_running = testbed.site().is_running()  # testbed.up() starts the site too
    testbed.up()
    os.environ.update(testbed.env())
    yield testbed.ACCESS_POINT
    if not was_running:
        testbed.ACCESS_POINT.stop()
    if not site_was_running:
        testbed.site().down()


@pytest.fixture
def workspace(access_point: testbed.Pool, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory the schedd (as the submitter) and the host both reach by the same path."""
    base = testbed.testbed_dir() / "work"
    base.mkdir(exist_ok=True, mode=0o755)
    path = Path(tmp_path_factory.mktemp("ws", numbered=True).name)
    work = base / f"{path.name}-{os.getpid()}"
    work.mkdir(mode=0o755)
    os.chown(work, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
    return work


@pytest.fixture
def state_dir(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # root's ledger where no user can write: not in the submitter's workspace
    state = testbed.root_state_dir(workspace.name)
    monkeypatch.setenv("LUMBERJACK_STATE_DIR", str(state))
    return state


@pytest.fixture(scope="session")
def site():
    """The emulated HPC site (login node sshd + Slurm c1..c3), started once per session
    by testbed.up(); whatever this fixture started, it stops."""
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (namespaces, pivot_root)")
    the_site = testbed.site()
    site_was_running = the_site.is_running()
    ap_was_running = testbed.ACCESS_POINT.is_running()
    testbed.up()
    yield the_site
    if not site_was_running:
        the_site.down()
    if not ap_was_running:
        testbed.ACCESS_POINT.stop()


@pytest.fixture
def at_site(site):
    """Names of the exports a test sends to the testbed site: whatever happens, their
    pools and pilots are stopped and their directories removed afterwards."""
    from journey import SITE_BASE, stop_at_site

    sent: list[str] = []
    yield sent
    for name in sent:
        stop_at_site(name, f"{SITE_BASE}/{name}")


#: Where each run of pytest leaves every test's time, slowest first (`make test` writes
#: one file per tier): LUMBERJACK_DURATIONS names the file; unset, nothing is written.
DURATIONS_ENV = "LUMBERJACK_DURATIONS"
_durations: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Setup, call and teardown of one test, summed (with xdist: reported to the controller).
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get(DURATIONS_ENV)
    if not target or hasattr(session.config, "workerinput"):
        return
    slowest = sorted(_durations.items(), key=lambda item: -item[1])
    lines = [f"{seconds:9.1f} s  {nodeid}" for nodeid, seconds in slowest]
    total = sum(_durations.values())
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_text(
        f"{total:9.1f} s  in all, {len(slowest)} tests\n" + "\n".join(lines) + "\n"
    )
