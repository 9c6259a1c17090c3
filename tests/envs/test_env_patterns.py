"""The Python and Gymnasium patterns users try, on every env with real data and the real sandbox: bad actions
rejected alike by the action space and ``step``, SDK message objects, reset options, pickling and deep
copies, async vector envs, JSON observations, ``close()`` and the shared ``info`` keys."""

from __future__ import annotations

import copy
import json
import os
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory
from openai.types.chat import ChatCompletionMessage

import hopgym  # noqa: F401 - registers the envs

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm's import then fetches nothing

from hopgym.envs.spaces import SHARED_SLOT_BYTES, ChatObservationSpace
from hopgym.errors import ActionError, ConfigError, HopgymError
from hopgym.sandbox import make_sandbox
from tests.shared_data import needs_data

pytestmark = [needs_data("toolhop/toolhop_subset100.jsonl"), needs_data("familytool/familytool-e.jsonl")]

SAMPLE_VALUES = {"string": "x", "integer": 1, "number": 1.5, "boolean": True, "array": ["x"], "object": {}}
COMMON_INFO_KEYS = {"task_id", "hops", "feedback", "isolation", "tool_choice", "turn", "num_calls", "calls"}
MAKERS: dict[str, Callable[[], gym.Env]] = {
    "toolhop": lambda: gym.make("ToolHop-v0"),
    "familytool": lambda: gym.make("FamilyTool-v0", kg="tools"),
    "kgtool": lambda: gym.make("KGTool-v0", kg="family-e", patterns="2p", n=2),
}


def sample_value(schema: dict[str, Any]) -> Any:
    """A value that passes ``schema``: its first enum value, or one of its type with required fields."""
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        return sample_value(schema["anyOf"][0])
    if schema.get("type", "object") == "object":
        properties = schema.get("properties", {})
        return {name: sample_value(properties[name]) for name in schema.get("required", [])}
    return SAMPLE_VALUES[schema["type"]]


def a_tool_call(observation: dict[str, Any]) -> dict[str, Any]:
    """A schema-valid call of the last offered tool (for FamilyTool a KG tool, which runs)."""
    function = observation["tools"][-1]["function"]
    arguments = sample_value(function["parameters"])
    return {
        "id": "c0",
        "type": "function",
        "function": {"name": function["name"], "arguments": json.dumps(arguments)},
    }


@pytest.fixture(scope="module", params=list(MAKERS))
def env(request: pytest.FixtureRequest) -> Iterator[gym.Env]:
    made = MAKERS[request.param]()
    yield made
    made.close()


BAD_ACTIONS = [
    ({"role": "assistant", "content": "", "tool_calls": "notalist"}, "tool_calls must be a list"),
    ({"role": "user", "content": "Paris"}, "role must be 'assistant'"),
    ({"role": "assistant", "content": 3}, "content must be a string"),
    ({"role": "assistant", "content": "", "tool_calls": ["f"]}, r"tool_calls\[0\] must be a dict"),
    ({"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]}, "has no 'name'"),
    ({"role": "assistant", "content": "", "tool_calls": [{"function": "f"}]}, r"'function'\] must be a dict"),
    ({"role": "assistant", "content": "", "code": 7}, "'code' must be a string"),
    (42, "got int"),
]


@pytest.mark.parametrize(("action", "why"), BAD_ACTIONS)
def test_a_bad_action_is_rejected_alike_by_the_space_and_step(env: gym.Env, action: Any, why: str) -> None:
    observation, _ = env.reset(options={"index": 0})
    assert not env.action_space.contains(action)
    with pytest.raises(ActionError, match=why):
        env.step(action)
    # Nothing was recorded: the same episode goes on with a valid action.
    assert env.unwrapped._turns == 0 and len(env.unwrapped._messages) == len(observation["messages"])
    valid = {"role": "assistant", "content": "", "tool_calls": [a_tool_call(observation)]}
    _, _, _, _, info = env.step(valid)
    assert info["turn"] == 1 and [c["status"] for c in info["calls"]] in (["ok"], ["tool_error"])


def test_openai_and_litellm_message_objects_are_taken_as_they_are(env: gym.Env) -> None:
    import litellm  # seconds of imports: not while collecting, on workers that never run this test

    observation, _ = env.reset(options={"index": 0})
    call = a_tool_call(observation)
    sdk = ChatCompletionMessage.model_validate({"role": "assistant", "content": None, "tool_calls": [call]})
    lite = litellm.Message(role="assistant", content=None, tool_calls=[call])
    for message in (sdk, lite):
        assert env.action_space.contains(message)
    _, _, _, _, info = env.step(sdk)
    assert [c["name"] for c in info["calls"]] == [call["function"]["name"]]
    env.reset(options={"index": 0})
    _, _, _, _, info = env.step(lite)
    assert [c["name"] for c in info["calls"]] == [call["function"]["name"]]
    env.reset(options={"index": 0})
    _, _, _, _, info = env.step({"role": "assistant", "content": None, "tool_calls": sdk.tool_calls})
    assert [c["name"] for c in info["calls"]] == [call["function"]["name"]]  # SDK call objects in a dict
    answer = ChatCompletionMessage(role="assistant", content="Paris")
    _, _, terminated, _, _ = env.step(answer)
    assert terminated and env.unwrapped._messages[-1] == {"role": "assistant", "content": "Paris"}


def test_reset_options_are_checked(env: gym.Env) -> None:
    _, info = env.reset(options={"index": np.int64(1)})
    assert info["task_id"] == env.unwrapped.tasks[1].id
    for options, why in (
        ({"index": True}, "index must be an integer"),
        ({"index": np.bool_(True)}, "index must be an integer"),
        ({"index": 1.0}, "index must be an integer"),
        ({"idx": 3}, "unknown reset option.*'idx'.*valid: 'task_id', 'index'"),
        ({"index": 0, "task_id": info["task_id"]}, "not both"),
        ([("index", 0)], "must be a dict"),
    ):
        with pytest.raises(ConfigError, match=why):
            env.reset(options=options)


def test_observations_are_json_and_info_has_the_shared_keys(env: gym.Env) -> None:
    observation, info = env.reset(options={"index": 0})
    assert set(info) >= COMMON_INFO_KEYS
    observation, _, _, _, info = env.step(
        {"role": "assistant", "content": "", "tool_calls": [a_tool_call(observation)]}
    )
    assert set(info) >= COMMON_INFO_KEYS
    assert json.loads(json.dumps(observation)) == observation
    assert env.observation_space.contains(observation)


@pytest.mark.parametrize("copier", [copy.deepcopy, lambda e: pickle.loads(pickle.dumps(e))])
def test_a_copy_mid_episode_has_its_own_sandbox_and_continues(env: gym.Env, copier: Callable) -> None:
    observation, _ = env.reset(options={"index": 0})
    call = a_tool_call(observation)
    duplicate = copier(env)
    try:
        original = env.unwrapped.sandbox
        assert duplicate.unwrapped.sandbox is not None and duplicate.unwrapped.sandbox is not original
        results = []
        for each in (env, duplicate):
            _, _, _, _, info = each.step({"role": "assistant", "content": "", "tool_calls": [call]})
            results.append((info["calls"][0]["status"], info["calls"][0]["feedback"]))
        assert results[0] == results[1] and results[0][0] in {"ok", "tool_error"}
        duplicate.close()
        _, _, terminated, _, _ = env.step("done")  # closing the copy leaves the original working
        assert terminated
    finally:
        duplicate.close()


def test_every_env_refuses_reset_and_step_after_close_the_same_way() -> None:
    for name, make in MAKERS.items():
        made = make()
        made.reset(options={"index": 0})
        made.close()
        made.close()  # a second close is harmless
        with pytest.raises(HopgymError, match="this env was closed"):
            made.reset(options={"index": 0})
        with pytest.raises(HopgymError, match="this env was closed"):
            made.unwrapped.step("x")
        assert made.unwrapped.sandbox is None, name


def test_an_async_vector_env_of_toolhop_envs_runs_real_tool_calls_without_extra_flags() -> None:
    vector = gym.vector.AsyncVectorEnv([MAKERS["toolhop"], MAKERS["toolhop"]])
    try:
        observations, infos = vector.reset(options={"index": 0})
        assert len(observations) == 2 and observations[0] == observations[1]
        calls = [a_tool_call(observation) for observation in observations]
        observations, rewards, terminated, _, infos = vector.step(
            tuple({"role": "assistant", "content": "", "tool_calls": [call]} for call in calls)
        )
        for index in range(2):
            tool_message = observations[index]["messages"][-1]
            assert tool_message["role"] == "tool" and tool_message["content"]
            assert infos["calls"][index][0]["status"] in {"ok", "tool_error"}
            assert infos["isolation"][index] == infos["isolation"][0] != "none (no tools offered)"
        observations, rewards, terminated, _, infos = vector.step(("I do not know", "I do not know"))
        assert list(terminated) == [True, True] and list(rewards) == [0.0, 0.0]
    finally:
        vector.close()


def test_an_env_on_a_sandbox_it_was_given_refuses_to_be_copied_and_keeps_working() -> None:
    with make_sandbox("process") as sandbox:
        env = gym.make("ToolHop-v0", sandbox=sandbox)
        with pytest.raises(TypeError, match=r"make the env with a backend name \(e.g. sandbox='process'\)"):
            pickle.dumps(env)
        with pytest.raises(TypeError, match="cannot share"):
            copy.deepcopy(env)
        observation, _ = env.reset(options={"index": 0})
        _, _, _, _, info = env.step(
            {"role": "assistant", "content": "", "tool_calls": [a_tool_call(observation)]}
        )
        assert info["calls"][0]["status"] in {"ok", "tool_error"}
        env.close()


def test_an_observation_too_large_for_shared_memory_names_the_way_out() -> None:
    space = ChatObservationSpace()
    buffer = create_shared_memory(space, n=2)
    small = {"messages": [{"role": "user", "content": "x"}], "tools": []}
    write_to_shared_memory(space, 1, small, buffer)
    huge = {"messages": [{"role": "user", "content": "x" * SHARED_SLOT_BYTES}], "tools": []}
    with pytest.raises(ValueError, match="shared_memory=False"):
        write_to_shared_memory(space, 0, huge, buffer)
    view = read_from_shared_memory(space, buffer, n=2)
    assert copy.deepcopy(view) == (None, small)  # the failed write left both slots as they were
