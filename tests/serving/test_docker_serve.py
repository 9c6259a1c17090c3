"""The Dockerfile's ``serve`` stage: ``hopgym serve env`` in a container, built from this checkout, its port
published on the host's 127.0.0.1, the data mounted read-only, driven by hopgym's OpenEnv client.

Inside the container (no bubblewrap, Docker's default seccomp profile, no writable cgroups) the process
sandbox runs with ``isolation="none"`` and ``cgroup="none"``, asked for explicitly with CodeAct code allowed;
without that request the server refuses to start. The container runs as the Dockerfile says: the server as
root with four capabilities, the workers as nobody, the data and key file in root's 0700 /hopgym; a
client's code then reads none of the server's secrets nor leaves a file for another session, and the
server keeps serving.

Needs a reachable Docker engine, the base image that ``.ci/docker-setup.sh`` builds and the shared data; in
CI (CI=true) a missing prerequisite fails, elsewhere it skips with the reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extras import require_extra
from tests.paths import ROOT

require_extra("openenv.core", "serve")
require_extra("docker", "docker")

from hopgym.errors import DockerUnavailableError, EnvServerError  # noqa: E402
from hopgym.sandbox.docker.engine import build_image, connect_engine, sdk  # noqa: E402
from tests.toolhop_episodes import in_process, outcome, over_the_server, policy  # noqa: E402

pytestmark = pytest.mark.docker

DATA = Path(os.environ.get("HOPGYM_DATA", "/nonexistent"))
BASE_IMAGE = os.environ.get("HOPGYM_BASE_IMAGE", "hopgym-base:bookworm")
IMAGE = "hopgym-serve:test"
API_KEY = "test-key-of-the-served-container"
EXPLICIT = [
    "--env-arg",
    'sandbox_options={"isolation": "none", "cgroup": "none"}',
    "--allow-unisolated-code",
]
ISOLATION = "seccomp+rlimits"
READY = re.compile(r"^ready: --base-url http://0\.0\.0\.0:8000$", re.MULTILINE)


def missing_prerequisite() -> str | None:
    if not (DATA / "toolhop" / "toolhop_subset100.jsonl").is_file():
        return f"the ToolHop subset is not under {DATA} (set HOPGYM_DATA to the shared data)"
    try:
        api = connect_engine()
        api.inspect_image(BASE_IMAGE)
    except DockerUnavailableError as exc:
        return str(exc)
    except sdk().errors.ImageNotFound:
        return f"the base image {BASE_IMAGE!r} is missing: run .ci/docker-setup.sh"
    return None


@pytest.fixture(scope="module")
def docker_client() -> Iterator[Any]:
    """The engine, with the serve stage built from this checkout and a bridge network of the module's own
    (the CI engine runs without its default bridge)."""
    missing = missing_prerequisite()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the Docker serve tests must run in CI: {missing}")
        pytest.skip(missing)
    for _ in build_image(ROOT, tag=IMAGE, base=BASE_IMAGE, target="serve", network="host"):
        pass
    client = sdk().from_env(version="auto", timeout=120)
    network = client.networks.create(f"hopgym-serve-test-{os.getpid()}", driver="bridge")
    try:
        yield client
    finally:
        network.remove()
        client.close()


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("key") / "api-key"
    path.write_text(API_KEY + "\n")
    path.chmod(0o600)
    return path


def run_server(client: Any, key_file: Path, *arguments: str) -> Any:
    """The serve stage run as the Dockerfile's comment says."""
    command = ["serve", "env", "--host", "0.0.0.0", "--port", "8000", "--max-sessions", "2"]
    return client.containers.run(
        IMAGE,
        [*command, "--api-key-file", "/hopgym/api-key", *arguments],
        detach=True,
        network=f"hopgym-serve-test-{os.getpid()}",
        ports={"8000/tcp": ("127.0.0.1", None)},
        volumes={
            str(DATA.resolve()): {"bind": "/hopgym/data", "mode": "ro"},
            str(key_file): {"bind": "/hopgym/api-key", "mode": "ro"},
        },
        cap_drop=["ALL"],
        cap_add=["SETUID", "SETGID", "KILL", "DAC_READ_SEARCH"],
        security_opt=["no-new-privileges"],
        ipc_mode="none",
    )


def wait_for(container: Any, pattern: re.Pattern[str], timeout: float = 120.0) -> str:
    """The container's output once ``pattern`` is in it (or it exited)."""
    deadline = time.monotonic() + timeout
    while True:
        container.reload()
        logs = container.logs().decode(errors="replace")
        if pattern.search(logs) or container.status == "exited" or time.monotonic() > deadline:
            return logs
        time.sleep(0.2)


@pytest.fixture(scope="module")
def served(docker_client: Any, key_file: Path) -> Iterator[tuple[str, str]]:
    """The served container's base URL on the host's loopback and its output up to ready."""
    container = run_server(docker_client, key_file, *EXPLICIT)
    try:
        logs = wait_for(container, READY)
        assert READY.search(logs), logs
        container.reload()
        port = container.ports["8000/tcp"][0]["HostPort"]
        assert container.ports["8000/tcp"][0]["HostIp"] == "127.0.0.1"
        yield f"http://127.0.0.1:{port}", logs
    finally:
        container.remove(force=True)


def test_episodes_in_the_container_equal_in_process_steps(served: tuple[str, str]) -> None:
    url, _ = served
    episodes = range(6)
    remote = asyncio.run(over_the_server(url, episodes, 2, api_key=API_KEY))
    assert remote == in_process(episodes)
    statuses = {call[2] for steps in remote for step in steps for call in step[3]}
    assert "ok" in statuses


def test_the_container_reports_the_isolation_it_was_asked_for(served: tuple[str, str]) -> None:
    from hopgym.serving.openenv_client import HopgymEnvClient  # openenv.core: seconds to import

    url, logs = served
    assert f"sandbox: {ISOLATION}," in logs

    async def reset_info() -> dict[str, Any]:
        async with HopgymEnvClient(url, api_key=API_KEY) as client:
            return (await client.reset(index=0)).observation.info

    assert asyncio.run(reset_info())["isolation"] == ISOLATION


def test_without_an_explicit_weaker_isolation_the_container_refuses_to_start(
    docker_client: Any, key_file: Path
) -> None:
    container = run_server(docker_client, key_file)
    try:
        logs = wait_for(container, re.compile(r"(?!)"))  # until it exits
        assert container.wait(timeout=60)["StatusCode"] != 0
        # root in the container: the sandbox's defaults fail on what is missing, naming the explicit option
        assert ("isolation='none'" in logs or "cgroup='none'" in logs) and "ready:" not in logs, logs
    finally:
        container.remove(force=True)


def test_a_session_without_the_api_key_is_refused(served: tuple[str, str]) -> None:
    from hopgym.serving.openenv_client import HopgymEnvClient  # openenv.core: seconds to import

    url, _ = served

    async def without_key() -> None:
        async with HopgymEnvClient(url) as client:
            await client.reset(index=0)

    with pytest.raises(EnvServerError, match=r"refused the session.*403"):  # the handshake is refused
        asyncio.run(without_key())


ATTACK = """
import json, os
me = os.getpid()
got = []
def attempt(label, action):
    try:
        action()
    except OSError:
        return
    got.append(label)
attempt("data file", lambda: open("/hopgym/data/toolhop/toolhop_subset100.jsonl").read(1))
attempt("data folder", lambda: os.listdir("/hopgym/data"))
attempt("key file", lambda: open("/hopgym/api-key").read())
pids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
for pid in pids:
    attempt("environ of " + pid, lambda: open("/proc/" + pid + "/environ", "rb").read())
    attempt("mem of " + pid, lambda: open("/proc/" + pid + "/mem", "rb").read(1))
    attempt("root of " + pid, lambda: os.listdir("/proc/" + pid + "/root/hopgym"))
    attempt("cwd of " + pid, lambda: os.listdir("/proc/" + pid + "/cwd"))
for folder in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/home/hopgym", os.getcwd(), "/"):
    attempt("write in " + folder, lambda: open(os.path.join(folder, "left-for-another-session"), "w"))
cmdlines = [open("/proc/" + pid + "/cmdline", "rb").read().decode(errors="replace") for pid in pids]
print("ATTACK", json.dumps({"uid": os.getuid(), "pids": pids, "got": got, "cmdlines": cmdlines}))
"""


def test_a_clients_code_reads_no_secret_of_the_server_and_the_server_keeps_serving(
    served: tuple[str, str],
) -> None:
    """Two sessions at once: while one holds its worker, the other's code tries the data, the key file, every
    other process's environment, memory, root and cwd (the server's, the other session's worker), and to
    leave a file for another session. Every one fails; then both sessions play a normal episode."""
    from hopgym.serving.openenv_client import HopgymEnvClient
    from hopgym.serving.openenv_types import HopgymAction

    url, _ = served

    async def play(client: Any, episode: int) -> list[tuple[Any, ...]]:
        result, steps = await client.reset(index=episode), []
        while not result.done:
            result = await client.step(HopgymAction.of(policy(result.observation.model_dump(), episode)))
            steps.append(outcome(float(result.reward or 0), result.done, result.observation.info))
        return steps

    async def attack() -> tuple[dict[str, Any], list[list[tuple[Any, ...]]]]:
        async with (
            HopgymEnvClient(url, api_key=API_KEY) as other,
            HopgymEnvClient(url, api_key=API_KEY) as client,
        ):
            await other.reset(index=1)  # its worker is alive while the attack runs
            await client.reset(index=0)
            result = await client.step(HopgymAction(code=ATTACK))
            await client.step(HopgymAction(content="Final answer: unknown"))
            afterwards = [await play(client, 0), await play(other, 1)]
        printed = result.observation.messages[-1]["content"]
        assert "ATTACK " in printed, printed
        return json.loads(printed.split("ATTACK ", 1)[1].strip().splitlines()[0]), afterwards

    found, afterwards = asyncio.run(attack())
    # the server (pid 1: the image's entrypoint) and at least the other session's worker and a spare
    assert found["uid"] == 65534 and "1" in found["pids"] and len(found["pids"]) >= 3, found
    assert found["got"] == [], found["got"]
    assert not any(API_KEY in cmdline for cmdline in found["cmdlines"])
    assert afterwards == in_process(range(2))
