"""The docker tier's fixtures: a Docker engine (started here only if none runs), the
MiniCondor image, and pytest-docker's compose project of containers/minicondor/.

Skipped, with the reason, where no engine runs and none can be started.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from .docker_tier import COMPOSE_FILE, MINICONDOR, Pools, Tier, addresses, new_private

sys.path.insert(0, str(MINICONDOR))

import engine  # noqa: E402
import image  # noqa: E402
import testbed  # noqa: E402


@pytest.fixture(scope="module")
def tier(
    tmp_path_factory: pytest.TempPathFactory,
    docker_compose_command: str,
    docker_compose_project_name: str,
) -> Iterator[Tier]:
    """An engine (ours only if none ran), the image, the directories the compose file
    binds, and the machine's addresses before any of it."""
    if os.geteuid() != 0:
        pytest.skip("the docker tier needs root (bind mounts owned by the submitter)")
    reason = engine.why_no_engine()
    if reason:
        pytest.skip(f"docker tier: {reason}")
    before = addresses()
    with engine.running_engine() as running:
        started_here = running.started_here
        name = image.ensure_image()
        testbed.ensure_host_submitter()
        # Not under pytest's own 0700 directory: export reads inputs as the submitter.
        # This tier runs first in `make test`: on a fresh machine no `up` made the
        # testbed's directory yet.
        testbed.testbed_dir().mkdir(parents=True, exist_ok=True)
        os.chmod(testbed.testbed_dir(), 0o755)
        base = testbed.testbed_dir() / "work"
        base.mkdir(exist_ok=True, mode=0o755)
        work = base / f"{tmp_path_factory.mktemp('docker').name}-{os.getpid()}"
        work.mkdir(mode=0o755)
        os.chown(work, testbed.SUBMITTER_UID, testbed.SUBMITTER_UID)
        (work / "fs-auth").mkdir(mode=0o1777)  # FS_LOCAL_DIR of the access point (compose)
        os.chmod(work / "fs-auth", 0o1777)
        mini_spool = work / "mini-spool"
        mini_spool.mkdir()
        variables = {
            image.IMAGE_VARIABLE: name,
            "LUMBERJACK_DOCKER_WORK": str(work),
            "LUMBERJACK_DOCKER_STATE": str(testbed.root_state_dir(work.name)),
            "LUMBERJACK_MINI_SPOOL": str(mini_spool),
        }
        saved = {key: os.environ.get(key) for key in variables}
        os.environ.update(variables)
        try:
            yield Tier(name, work, mini_spool, before)
        finally:
            # Should pytest-docker's `up` fail, it does not clean up: `down` here too
            # (after its own `down`, a no-op), while the engine still runs.
            Pools(docker_compose_command, str(COMPOSE_FILE), docker_compose_project_name).compose(
                "down", "--volumes", "--timeout", "60", check=False
            )
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    # The engine we started is gone, and it left no address behind.
    if started_here:
        assert not engine.engine_answers()
    assert new_private(before, addresses()) == set()


@pytest.fixture(scope="module")
def docker_compose_file(tier: Tier) -> str:
    return str(COMPOSE_FILE)


@pytest.fixture(scope="module")
def docker_compose_project_name() -> str:
    return f"lumberjack-minicondor-{os.getpid()}"


@pytest.fixture(scope="module")
def docker_cleanup() -> list[str]:
    return ["down --volumes --timeout 60"]


@pytest.fixture(scope="module")
def pools(
    docker_services: object,
    docker_compose_command: str,
    docker_compose_file: str,
    docker_compose_project_name: str,
) -> Pools:
    """Both pools up and healthy (pytest-docker's `up --wait`)."""
    return Pools(docker_compose_command, docker_compose_file, docker_compose_project_name)
