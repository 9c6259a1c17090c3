"""Every env keeps docs/contracts.md, checked by check_chat_env on real data with the real process sandbox,
and the checker names the rule a broken env breaks."""

from __future__ import annotations

import gymnasium as gym
import pytest

import hopgym  # noqa: F401 - registers the envs
from hopgym.envs.env_checker import check_chat_env
from hopgym.errors import ContractError
from hopgym.sandbox import make_sandbox
from tests.shared_data import SUBSET, needs_data


@pytest.fixture(scope="module")
def sandbox():
    with make_sandbox("process") as shared:
        yield shared


@pytest.fixture
def toolhop(sandbox):
    env = gym.make("ToolHop-v0", data_path=SUBSET, sandbox=sandbox)
    yield env
    env.close()


@needs_data("toolhop/toolhop_subset100.jsonl")
@pytest.mark.parametrize("scenario", ["mandatory", "direct"])
def test_toolhop_keeps_the_contract(sandbox, scenario):
    env = gym.make("ToolHop-v0", data_path=SUBSET, scenario=scenario, sandbox=sandbox)
    check_chat_env(env)
    env.close()


@needs_data("familytool/familytool-e.jsonl")
@pytest.mark.parametrize("kg", ["gold", "tools"])
def test_familytool_keeps_the_contract(sandbox, kg):
    env = gym.make("FamilyTool-v0", variant="e", kg=kg, sandbox=sandbox)
    check_chat_env(env)
    env.close()


@needs_data("familytool/familykg-e.txt")
def test_kgtool_keeps_the_contract(sandbox):
    env = gym.make("KGTool-v0", kg="family-e", patterns="1p,2i", n=1, seed=0, sandbox=sandbox)
    check_chat_env(env)
    env.close()


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
