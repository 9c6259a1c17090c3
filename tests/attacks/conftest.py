"""Hostile-code tests, parametrized by sandbox backend. They run only contained (their own PID namespace and
a pids/memory cgroup), launched by ``tests/sandbox/test_sandbox_attacks_contained.py``; collected any other
way they are skipped, so a sandbox regression cannot fork-bomb or kill the machine that runs the suite."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hopgym.errors import DockerUnavailableError
from hopgym.sandbox import Sandbox, make_sandbox
from tests.extras import require_isolation

CONTAINED_ENV = "HOPGYM_ATTACKS_CONTAINED"
HOST_SECRET_ENV = "HOPGYM_TEST_HOST_SECRET"
HOST_SECRET = "host-secret-7f3a9c"

BACKENDS = [
    pytest.param(("process", {"isolation": "bwrap"}), id="process-bwrap"),
    pytest.param(("process", {"isolation": "namespaces"}), id="process-namespaces"),
    pytest.param(("process", {"isolation": "bwrap", "start": "fork"}), id="process-bwrap-fork"),
    pytest.param(("process", {"isolation": "namespaces", "start": "fork"}), id="process-namespaces-fork"),
    pytest.param(("docker", {}), id="docker"),
    pytest.param(("docker", {"runtime": "runsc"}), id="docker-gvisor"),
]
"""Every backend the attacks run against (the ``host_side`` ones: :data:`HOST_SIDE_BACKENDS`)."""

HOST_SIDE_BACKENDS = [backend for backend in BACKENDS if backend.id != "docker-gvisor"]
"""For the attacks marked ``host_side``, on the host's own reading of what a worker sends (replies,
results, tool documents). gVisor changes the kernel a worker sees, not the host code that reads the
container's stream: that code is the docker backend's, attacked here with runc. Leaving gVisor out of these
saves ~60 s of CPU per suite run (2026-11-27)."""


ATTACK_LIMITS = {"timeout": 3.0, "memory_mb": 256}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(CONTAINED_ENV) == "1":
        return
    skip = pytest.mark.skip(
        reason=f"attack tests run contained via test_sandbox_attacks_contained.py ({CONTAINED_ENV}=1)"
    )
    for item in items:
        if Path(__file__).parent in Path(item.fspath).parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def attack_limits() -> dict[str, float]:
    return dict(ATTACK_LIMITS)


@pytest.fixture(scope="session")
def host_secret() -> tuple[str, str]:
    """The name and value of a secret put in the host environment while sandboxes start."""
    return HOST_SECRET_ENV, HOST_SECRET


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrizes the module-scoped ``sandbox`` fixture here, not with fixture params: those cannot
    depend on a test's marks (``host_side``)."""
    if "sandbox" in metafunc.fixturenames:
        host_side = metafunc.definition.get_closest_marker("host_side") is not None
        backends = HOST_SIDE_BACKENDS if host_side else BACKENDS
        metafunc.parametrize("sandbox", backends, indirect=True, scope="module")


@pytest.fixture(scope="module")
def sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A sandbox started while a secret is in the host environment."""
    backend, options = request.param
    if "isolation" in options:
        require_isolation(options["isolation"])
    os.environ[HOST_SECRET_ENV] = HOST_SECRET
    try:
        box = make_sandbox(backend, **options, **ATTACK_LIMITS)
    except DockerUnavailableError as exc:  # no engine or image: required in CI, skipped elsewhere
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    finally:
        del os.environ[HOST_SECRET_ENV]
    yield box
    box.close()


@pytest.fixture(scope="module")
def host_dir() -> Iterator[Path]:
    """A host directory the sandbox could see if its root were shared: /var/tmp, not the private /tmp.

    World-writable, so only the read-only root (not file permissions) stops writes into it; it holds a
    root-only (0600) secret file, so only the dropped uid stops reads of it."""
    path = Path(tempfile.mkdtemp(prefix="hopgym-attack-", dir="/var/tmp"))
    path.chmod(0o777)
    secret = path / "secret.txt"
    secret.write_text(HOST_SECRET)
    secret.chmod(0o600)
    yield path
    shutil.rmtree(path)
