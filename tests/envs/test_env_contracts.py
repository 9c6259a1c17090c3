"""Every registered env keeps Gymnasium's API (check_env) and docs/contracts.md (check_chat_env), on real data
with the real process sandbox, and the checker names the rule a broken env breaks."""

from __future__ import annotations

import os

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from hopgym import ENV_IDS
from hopgym.envs.env_checker import check_chat_env
from hopgym.envs.env_options import env_class
from hopgym.errors import ContractError, DataError
from hopgym.sandbox import make_sandbox
from tests.shared_data import DATA, SUBSET, needs_data


@pytest.fixture(scope="module")
def sandbox():
    with make_sandbox("process") as shared:
        yield shared


@pytest.fixture
def toolhop(sandbox):
    env = gym.make("ToolHop-v0", data_path=SUBSET, sandbox=sandbox)
    yield env
    env.close()


CASES = [
    pytest.param(env_id, kwargs, id=f"{env_id}-{i}")
    for env_id in ENV_IDS
    for i, kwargs in enumerate(env_class(env_id).contract_cases)
]
"""Every registered env with each keyword set its class declares (``contract_cases``), as Gymnasium's
Gymnasium/tests/envs/test_envs.py runs over its registry: a new env is checked without a new test."""


def make_case(make, env_id, kwargs, sandbox):
    """``make(env_id, ...)`` of one case on the shared sandbox; skipped (outside CI) when the shared data is
    missing."""
    try:
        return make(env_id, **kwargs, sandbox=sandbox)
    except DataError:
        if DATA.is_dir() or os.environ.get("CI") == "true":
            raise
        pytest.skip("HOPGYM_DATA does not point at the shared data")


def made_directly(env_id, **kwargs):
    """The env without a spec: with one, check_env would deep-copy the kwargs to remake it, live sandbox
    included."""
    return env_class(env_id)(**kwargs)


@pytest.mark.parametrize(("env_id", "kwargs"), CASES)
def test_every_registered_env_keeps_the_contract(sandbox, env_id, kwargs):
    env = make_case(made_directly, env_id, kwargs, sandbox)
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()
    env = make_case(gym.make, env_id, kwargs, sandbox)
    try:
        check_chat_env(env)
    finally:
        env.close()


def test_every_registered_env_declares_its_contract_cases():
    assert {env_id for env_id, _ in (case.values for case in CASES)} == set(ENV_IDS)


class DropsInfoKey(gym.Wrapper):
    """A broken env: its step info lacks ``num_calls``."""

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward, terminated, truncated, {k: v for k, v in info.items() if k != "num_calls"}


class InventsStatus(gym.Wrapper):
    """A broken env: its call records carry a status the contract does not know."""

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        calls = [{**record, "status": "failed"} for record in info["calls"]]
        return observation, reward, terminated, truncated, {**info, "calls": calls}


class KeepsNoGold(gym.Wrapper):
    """A broken env: its final step does not say what the gold answer was."""

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward, terminated, truncated, {k: v for k, v in info.items() if k != "answer"}


@needs_data("toolhop/toolhop_subset100.jsonl")
@pytest.mark.parametrize(
    ("wrapper", "rule", "detail"),
    [
        (DropsInfoKey, "info keys", "num_calls"),
        (InventsStatus, "call record", "'failed'"),
        (KeepsNoGold, "terminal info keys", "answer"),
    ],
)
def test_a_broken_env_fails_with_the_rule_it_breaks(toolhop, wrapper, rule, detail):
    with pytest.raises(ContractError, match=rule) as raised:
        check_chat_env(wrapper(toolhop))
    assert detail in str(raised.value) and "docs/contracts.md" in str(raised.value)
    check_chat_env(toolhop)  # the env under the broken wrapper still keeps the contract
