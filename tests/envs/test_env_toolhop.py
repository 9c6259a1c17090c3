"""ToolHop-v0 under protocol="hopgym" end to end: real subset, real sandbox, the docs/contracts.md contract.

The official protocol (the default) has its own tests: tests/envs/test_env_toolhop_official.py and the
parity suite tests/envs/test_toolhop_parity.py.
"""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import hopgym  # noqa: F401  (registers ToolHop-v0)
from hopgym.envs.feedback import MINIMAL_HINT
from hopgym.envs.toolhop.env import ToolHopEnv
from hopgym.errors import ConfigError, HopgymError
from hopgym.sandbox import make_sandbox
from tests.paths import FIXTURES
from tests.shared_data import SUBSET, needs_data

TOOLHOP_FIXTURES = FIXTURES / "toolhop"
MISBEHAVING = TOOLHOP_FIXTURES / "misbehaving.jsonl"
needs_subset = needs_data("toolhop/toolhop_subset100.jsonl")


def tool_call(name, arguments, call_id="c1"):
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def calls_message(*calls):
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


@pytest.fixture(scope="module")
def sandbox():
    with make_sandbox("process") as shared:
        yield shared


@pytest.fixture(scope="module")
def subset_env(sandbox):
    env = ToolHopEnv(protocol="hopgym", data_path=SUBSET, sandbox=sandbox)
    yield env
    env.close()


@pytest.fixture
def misbehaving_env(sandbox):
    env = ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, sandbox=sandbox, call_timeout=1.0)
    env.reset(options={"index": 0})
    yield env
    env.close()


@needs_subset
@pytest.mark.parametrize("scenario", ["mandatory", "free", "direct"])
def test_check_env_passes(sandbox, scenario):
    env = ToolHopEnv(protocol="hopgym", data_path=SUBSET, scenario=scenario, sandbox=sandbox)
    check_env(env.unwrapped)
    env.close()


@needs_subset
def test_gym_make_with_default_data():
    env = gym.make("ToolHop-v0", protocol="hopgym")
    try:
        assert len(env.unwrapped.tasks) == 100
        observation, info = env.reset(seed=3)
        assert observation["messages"][1]["role"] == "user"
        assert info["isolation"] == env.unwrapped.sandbox.isolation
    finally:
        env.close()


@needs_subset
def test_every_subset_task_resets_and_loads_all_offered_tools(subset_env):
    for index, task in enumerate(subset_env.tasks):
        observation, info = subset_env.reset(options={"index": index})
        assert info["task_id"] == task.id and info["hops"] == task.hops
        assert info["load_errors"] == [], (task.id, info["load_errors"])
        assert [t["function"]["name"] for t in observation["tools"]] == list(task.tool_names)
        assert [m["role"] for m in observation["messages"]] == ["system", "user"]
        assert observation["messages"][1]["content"] == task.question


@needs_subset
def test_every_gold_call_runs_ok_through_step(subset_env):
    checked = 0
    for task in subset_env.tasks:
        if not task.gold_calls:
            continue
        subset_env.reset(options={"task_id": task.id})
        for call in task.gold_calls:
            _, _, terminated, truncated, info = subset_env.step(
                calls_message(tool_call(call.name, call.arguments))
            )
            record = info["calls"][0]
            assert record["status"] == "ok", (task.id, call.source, record["feedback"])
            assert not terminated and not truncated
            checked += 1
    assert checked == 95


@needs_subset
def test_duplicate_tools_are_named_in_info(subset_env):
    _, info = subset_env.reset(options={"task_id": "toolhop-035"})
    assert info["duplicate_tools"] == ["genealogy_query"]
    _, info = subset_env.reset(options={"task_id": "toolhop-001"})
    assert info["duplicate_tools"] == []


@needs_subset
def test_real_tool_error_value_is_tool_error(subset_env):
    # genealogy_query of toolhop-001 returns {'error': ...} for an empty (schema-valid) name.
    subset_env.reset(options={"task_id": "toolhop-001"})
    arguments = {"individual_name": "", "relationship_type": "father", "data_source": {"database_name": "db"}}
    _, _, _, _, info = subset_env.step(calls_message(tool_call("genealogy_query", arguments)))
    record = info["calls"][0]
    assert record["status"] == "tool_error" and record["errors"] == ["tool_error"]
    assert record["feedback"] == '{"error": "The individual_name parameter is required."}'


def test_final_answer_scores_and_ends(misbehaving_env):
    observation, reward, terminated, truncated, info = misbehaving_env.step("It is Paris.")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["correct"] is True and info["answer"] == "Paris"
    assert observation["messages"][-1] == {"role": "assistant", "content": "It is Paris."}
    with pytest.raises(HopgymError, match="call reset"):
        misbehaving_env.step("again")
    misbehaving_env.reset(options={"index": 0})
    _, reward, terminated, _, info = misbehaving_env.step(
        {"role": "assistant", "content": "Rome", "tool_calls": []}
    )
    assert (reward, terminated, info["correct"]) == (0.0, True, False)


def test_parallel_calls_run_in_order_with_one_record_each(misbehaving_env):
    observation, reward, terminated, truncated, info = misbehaving_env.step(
        calls_message(
            tool_call("capital_of", {"country": "France"}, "a"),
            tool_call("capital_of", '{"country": "Italy"}', "b"),
            tool_call("capital_of", {"country": "Spain"}, "c"),
            tool_call("no_such_tool", {}, "d"),
        )
    )
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert [r["id"] for r in info["calls"]] == ["a", "b", "c", "d"]
    assert [r["status"] for r in info["calls"]] == ["ok", "ok", "tool_error", "tool_hallucination"]
    tool_messages = list(observation["messages"])[-4:]
    assert [m["tool_call_id"] for m in tool_messages] == ["a", "b", "c", "d"]
    assert [m["content"] for m in tool_messages[:3]] == [
        "Paris",
        "Rome",
        '{"error": "Unknown country: Spain"}',
    ]
    assert [m["content"] for m in tool_messages] == [r["feedback"] for r in info["calls"]]
    assert info["calls"][0]["arguments"] == {"country": "France"}
    assert info["calls"][0]["latency_ms"] > 0


@pytest.mark.parametrize(
    ("name", "arguments", "status", "errors", "detail"),
    [
        ("capital", {"country": "France"}, "tool_hallucination", ["tool_hallucination"], "does not exist"),
        ("capital_of", '{"country": ', "invalid_arguments", ["invalid_arguments"], "not valid JSON"),
        (
            "capital_of",
            {"country": "France", "year": 1},
            "parameter_hallucination",
            ["parameter_hallucination"],
            "'year'",
        ),
        ("capital_of", {}, "parameter_missing", ["parameter_missing"], "'country'"),
        ("capital_of", {"country": 7}, "invalid_arguments", ["invalid_arguments"], "is not of type 'string'"),
        (
            "capital_of",
            {"city": 7},
            "parameter_hallucination",
            ["parameter_hallucination", "parameter_missing"],
            "'city'",
        ),
        ("boom", {"message": "kaput"}, "tool_error", ["tool_error"], "ValueError: kaput"),
    ],
)
def test_classification_and_detailed_feedback(misbehaving_env, name, arguments, status, errors, detail):
    _, _, _, _, info = misbehaving_env.step(calls_message(tool_call(name, arguments)))
    record = info["calls"][0]
    assert (record["status"], record["errors"]) == (status, errors)
    assert detail in record["feedback"]


def test_minimal_feedback_hides_every_failure_but_not_results(sandbox):
    env = ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, sandbox=sandbox, feedback="minimal")
    env.reset(options={"index": 0})
    _, _, _, _, info = env.step(
        calls_message(
            tool_call("capital_of", {"country": "France"}, "a"),
            tool_call("capital_of", {"country": "Spain"}, "b"),
            tool_call("boom", {"message": "kaput"}, "c"),
            tool_call("capital_of", {}, "d"),
            tool_call("nope", "{", "e"),
        )
    )
    assert [r["feedback"] for r in info["calls"]] == ["Paris"] + [MINIMAL_HINT] * 4
    assert [r["status"] for r in info["calls"]] == [
        "ok",
        "tool_error",
        "tool_error",
        "parameter_missing",
        "tool_hallucination",
    ]
    env.close()


def test_hanging_tool_times_out_and_the_next_call_works(misbehaving_env):
    _, _, _, _, info = misbehaving_env.step(calls_message(tool_call("spin", {})))
    assert info["calls"][0]["status"] == "timeout"
    _, _, _, _, info = misbehaving_env.step(calls_message(tool_call("capital_of", {"country": "Italy"})))
    assert (info["calls"][0]["status"], info["calls"][0]["feedback"]) == ("ok", "Rome")


def test_huge_result_is_truncated_but_ok(sandbox):
    """Making and encoding 50 MB takes a while on a loaded machine: the call deadline is far off, so the
    verdict is about truncation, not speed."""
    env = ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, sandbox=sandbox, call_timeout=60.0)
    env.reset(options={"index": 0})
    _, _, _, _, info = env.step(calls_message(tool_call("flood", {"size": 50_000_000})))
    env.close()
    record = info["calls"][0]
    assert record["status"] == "ok" and record["truncated"] is True
    assert len(record["feedback"]) < 1_000_000


def test_print_flood_does_not_reach_the_result(misbehaving_env):
    _, _, _, _, info = misbehaving_env.step(calls_message(tool_call("shout", {})))
    assert (info["calls"][0]["status"], info["calls"][0]["feedback"]) == ("ok", "done")


def test_max_turns_truncates(sandbox):
    env = ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, sandbox=sandbox, max_turns=2)
    env.reset(options={"index": 0})
    action = calls_message(tool_call("capital_of", {"country": "France"}))
    assert env.step(action)[3] is False
    _, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated, info["turn"]) == (0.0, False, True, 2)
    with pytest.raises(HopgymError):
        env.step("Paris")
    env.close()


def test_tool_choice_per_scenario(sandbox):
    env = ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, sandbox=sandbox, scenario="mandatory")
    _, info = env.reset(options={"index": 0})
    assert info["tool_choice"] == "required"
    _, _, _, _, info = env.step(calls_message(tool_call("capital_of", {"country": "France"})))
    assert info["tool_choice"] == "auto"
    env.close()
    free = ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, sandbox=sandbox, scenario="free")
    assert free.reset(options={"index": 0})[1]["tool_choice"] == "auto"
    free.close()
    direct = ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, scenario="direct")
    observation, info = direct.reset(options={"index": 0})
    assert observation["tools"] == [] and info["tool_choice"] == "none" and direct.sandbox is None
    _, _, _, _, info = direct.step(calls_message(tool_call("capital_of", {"country": "France"})))
    assert info["calls"][0]["status"] == "tool_hallucination"
    direct.close()


def test_system_prompts_differ_by_scenario(sandbox):
    prompts = {}
    for scenario in ("mandatory", "free", "direct"):
        env = ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, sandbox=sandbox, scenario=scenario)
        prompts[scenario] = env.reset(options={"index": 0})[0]["messages"][0]["content"]
        env.close()
    assert "must use the tools at every step" in prompts["mandatory"]
    assert "final answer must come from the tool results" in prompts["mandatory"]
    assert "may use the provided tools" in prompts["free"]
    assert "no tools are available" in prompts["direct"]


def test_kept_observations_do_not_change(misbehaving_env):
    first, _ = misbehaving_env.reset(options={"index": 0})
    second, *_ = misbehaving_env.step(calls_message(tool_call("capital_of", {"country": "France"})))
    assert len(first["messages"]) == 2 and len(second["messages"]) == 4
    assert list(second["messages"])[:2] == list(first["messages"])
    assert first["messages"] == list(first["messages"])


def test_normalized_scorer_and_bad_options(sandbox):
    env = ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, sandbox=sandbox, scorer="normalized")
    env.reset(options={"index": 0})
    assert env.step("PARIS!")[1] == 1.0
    with pytest.raises(ConfigError, match="unknown task_id"):
        env.reset(options={"task_id": "nope"})
    with pytest.raises(ConfigError, match="index must be"):
        env.reset(options={"index": 5})
    env.close()
    with pytest.raises(ConfigError, match=r"unknown scenario 'forced'.*; valid: direct, mandatory, free"):
        ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, sandbox=sandbox, scenario="forced")
    with pytest.raises(ConfigError, match="unknown feedback mode 'verbose'; valid: detailed, minimal"):
        ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, sandbox=sandbox, feedback="verbose")


def test_a_given_sandbox_is_not_closed_by_the_env(sandbox):
    env = ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, sandbox=sandbox)
    env.close()
    assert sandbox.load(["def f():\n    return 1\n"]).functions == ("f",)
    assert sandbox.call("f", {}).value == 1
