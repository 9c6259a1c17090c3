"""ToolHop-v0 with ``sandbox="docker"``: the env contract and the real subset, every tool call in a container.

Needs a reachable Docker engine, the sandbox image and the shared data; in CI (CI=true) a missing
prerequisite fails, elsewhere it skips with the reason.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import hopgym  # noqa: F401  (registers ToolHop-v0)
from hopgym.errors import DockerUnavailableError
from hopgym.sandbox.docker.containers import ProcessIdentity, list_sandbox_containers
from hopgym.sandbox.docker.engine import connect_engine, require_image

pytestmark = pytest.mark.docker

SUBSET = Path(os.environ.get("HOPGYM_DATA", "/nonexistent")) / "toolhop" / "toolhop_subset100.jsonl"


def missing_prerequisite() -> str | None:
    if not SUBSET.is_file():
        return f"the ToolHop subset is not at {SUBSET} (set HOPGYM_DATA to the shared data)"
    try:
        require_image(connect_engine(), "hopgym-sandbox:latest")
    except DockerUnavailableError as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module", autouse=True)
def prerequisites() -> None:
    missing = missing_prerequisite()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the Docker env tests must run in CI: {missing}")
        pytest.skip(missing)


@pytest.fixture(scope="module")
def env() -> Iterator[gym.Env]:
    made = gym.make("ToolHop-v0", data_path=SUBSET, sandbox="docker", sandbox_options={"spares": 2})
    yield made
    made.close()
    assert list_sandbox_containers(connect_engine(), ProcessIdentity.of(os.getpid())) == []


def calls_message(name: str, arguments: dict) -> dict:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def test_check_env_passes_with_docker() -> None:
    env = gym.make("ToolHop-v0", sandbox="docker")
    try:
        check_env(env.unwrapped)
        _, info = env.reset(options={"index": 0})
        assert info["isolation"] == "docker+seccomp+rlimits"
    finally:
        env.close()


def test_every_subset_tool_loads_and_every_gold_call_runs_ok_in_containers(env: gym.Env) -> None:
    tasks = env.unwrapped.tasks
    assert len(tasks) == 100
    gold_calls = 0
    for index, task in enumerate(tasks):
        observation, info = env.reset(options={"index": index})
        assert info["load_errors"] == [], (task.id, info["load_errors"])
        offered = [t["function"]["name"] for t in observation["tools"]]  # the official protocol offers
        assert set(offered) == set(task.tool_names) and len(offered) == len(task.documents)  # duplicates
        for call in task.gold_calls:
            _, _, terminated, _, step_info = env.step(calls_message(call.name, call.arguments))
            record = step_info["calls"][0]
            assert record["status"] == "ok", (task.id, call.source, record["feedback"])
            assert not terminated
            gold_calls += 1
    assert gold_calls == 95
