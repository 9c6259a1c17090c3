"""FamilyTool-v0 on the real data ($HOPGYM_DATA/familytool) with the real process sandbox."""

from __future__ import annotations

import collections
import json
import pickle

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import hopgym  # noqa: F401 - registers the envs
from hopgym.envs.familytool.env import SYSTEM_PROMPT, FamilyToolEnv, bare_query
from hopgym.envs.familytool.metrics import aggregate_metrics
from hopgym.errors import ActionError, ConfigError, HopgymError
from hopgym.sandbox import make_sandbox
from hopgym.tasks.familytool.dataset import EXTRA_INFO_MARKER

ALL_KG_METRICS = ("kg_em", "kg_f1", "kg_no_hallucination", "kg_coverage")


@pytest.fixture(scope="module")
def sandbox():
    with make_sandbox("process") as shared:
        yield shared


def tool_call(name, arguments, call_id="c1"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def reply(*calls):
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def extracted_then(env, search_text, action):
    """The kg="extract" episode: the KG.search turn, then ``action``; the final step's result."""
    observation, reward, terminated, truncated, info = env.step({"role": "assistant", "content": search_text})
    assert (reward, terminated, truncated) == (0.0, False, False) and "extraction" in info
    assert EXTRA_INFO_MARKER in observation["messages"][1]["content"]
    return env.step(action)


def gold_search_text(task):
    """KG.search lines that walk exactly the gold sub-KG: one per chain from a head that is no gold tail."""
    tails = {tail for _, _, tail in task.gold_subkg}
    following = collections.defaultdict(list)
    for head, relation, tail in task.gold_subkg:
        following[head].append((relation, tail))
    lines = []

    def walk(start, node, path):
        if not following[node]:
            lines.append(f"KG.search(start={start}, path=[{', '.join(path)}])")
        for relation, tail in following[node]:
            walk(start, tail, [*path, relation])

    for start in dict.fromkeys(head for head, _, _ in task.gold_subkg if head not in tails):
        walk(start, start, [])
    return "\n".join(lines)


def gold_reply(task):
    return reply(tool_call(task.gold_call.name, dict(task.gold_call.arguments)))


@pytest.mark.parametrize("variant", ["b", "e"])
def test_gold_oracle_scores_100_on_every_metric(variant):
    env = gym.make("FamilyTool-v0", variant=variant, kg="extract")
    records = []
    for index, task in enumerate(env.unwrapped.tasks):
        env.reset(options={"index": index})
        _, reward, terminated, _, info = extracted_then(env, gold_search_text(task), gold_reply(task))
        assert info["turn"] == 2 and terminated and reward == 1.0 and info["correct"], task.id
        records.append({"metrics": info["metrics"]})
    summary = aggregate_metrics(records)
    assert summary["episodes"] == summary["kg_episodes"] == len(env.unwrapped.tasks)
    for key in ("tool_em", "tool_acc", "value_acc", *ALL_KG_METRICS):
        assert summary[key] == 1.0, key
    assert summary["kg_format_error"] == 0.0
    env.close()


def test_deliberately_wrong_oracles_do_not_score_100():
    env = gym.make("FamilyTool-v0", variant="e", kg="extract")
    records = []
    for index, task in enumerate(env.unwrapped.tasks[:40]):
        env.reset(options={"index": index})
        arguments = {key: "nothing_0000" for key in task.gold_call.arguments}
        wrong_values = reply(tool_call(task.gold_call.name, arguments))
        first_hop_only = f"KG.search(start={task.gold_subkg[0][0]}, path=[{task.gold_subkg[0][1]}])"
        records.append({"metrics": extracted_then(env, first_hop_only, wrong_values)[4]["metrics"]})
    summary = aggregate_metrics(records)
    assert summary["tool_acc"] == 1.0 and summary["tool_em"] == 0.0 and summary["value_acc"] == 0.0
    assert summary["kg_em"] == 0.0 and summary["kg_coverage"] < 1.0 and 0 < summary["kg_f1"] < 1
    env.close()


def test_prompts_per_kg_mode():
    by_mode = {}
    for mode in ("gold", "none", "full"):
        env = FamilyToolEnv(variant="e", kg=mode)
        observation, info = env.reset(options={"task_id": "KGMTUbench_0"})
        by_mode[mode] = observation["messages"][1]["content"]
        assert [t["function"]["name"] for t in observation["tools"]] == info["candidate_tools"]
        assert info["isolation"].startswith("none")
        env.close()
    assert "[Jack, father, William]" in by_mode["gold"]
    assert (
        by_mode["none"]
        == "<speak>Speaker: Jack</speak> Show me a house at a spot my father's favorite pickup location."
    )
    assert EXTRA_INFO_MARKER not in by_mode["none"]
    assert by_mode["full"].startswith(by_mode["none"]) and by_mode["full"].count("], [") == 491 - 1


@pytest.mark.parametrize("mode", ["gold", "none", "full", "tools", "extract"])
def test_check_env_passes(mode, sandbox):
    env = FamilyToolEnv(variant="b", kg=mode, sandbox=sandbox)
    check_env(env)
    env.close()


def test_without_kg_tools_the_first_reply_ends_the_episode():
    env = FamilyToolEnv(variant="e", kg="none")
    env.reset(options={"index": 0})
    _, reward, terminated, _, info = env.step(
        reply(tool_call("kg_search", {"start": "Jack", "path": ["father"]}))
    )
    assert terminated and reward == 0.0
    assert info["calls"][0]["status"] == "tool_hallucination" and info["calls"][0]["executed"] is False
    assert info["metrics"]["tool_acc"] == 0.0 and "kg_em" not in info["metrics"]
    with pytest.raises(HopgymError, match="reset"):
        env.step("done")
    env.reset(options={"index": 0})
    assert env.step("I cannot help.")[1:3] == (0.0, True)


def test_tools_mode_runs_kg_tools_then_scores_the_candidate_call(sandbox):
    env = FamilyToolEnv(variant="e", kg="tools", sandbox=sandbox, max_turns=4)
    observation, info = env.reset(options={"task_id": "KGMTUbench_0"})
    offered = [t["function"]["name"] for t in observation["tools"]]
    assert "kg_search" in offered and "kg_prefer_pickup_location" in offered and "SearchHouse" in offered
    assert info["isolation"] == sandbox.isolation
    _, reward, terminated, truncated, info = env.step(reply(tool_call("kg_father", {"entity": "Jack"})))
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["calls"][0]["status"] == "ok" and info["calls"][0]["feedback"] == '["William"]'
    walk = reply(tool_call("kg_search", {"start": "William", "path": ["prefer_pickup_location"]}))
    observation, _, _, _, info = env.step(walk)
    assert "pickup_location_0007" in observation["messages"][-1]["content"]
    _, _, _, _, info = env.step(reply(tool_call("kg_mother", {"person": "Jack"})))
    assert info["calls"][0]["status"] == "parameter_hallucination"
    final = reply(
        tool_call("kg_father", {"entity": "Jack"}, "a"),
        tool_call("SearchHouse", {"where_to": "pickup_location_0007"}, "b"),
    )
    _, reward, terminated, _, info = env.step(final)
    assert terminated and reward == 1.0
    assert [c["executed"] for c in info["calls"]] == [False, False]
    assert info["answer"] == {"name": "SearchHouse", "arguments": {"where_to": "pickup_location_0007"}}


def test_tools_mode_truncates_at_max_turns(sandbox):
    env = FamilyToolEnv(variant="e", kg="tools", sandbox=sandbox, max_turns=2)
    env.reset(options={"index": 3})
    lookup = reply(tool_call("kg_father", {"entity": "Jack"}))
    assert env.step(lookup)[2:4] == (False, False)
    assert env.step(lookup)[2:4] == (False, True)


def test_inductive_kg_changes_reach_tools_prompts_and_extraction(sandbox):
    env = FamilyToolEnv(variant="e", kg="tools", sandbox=sandbox)
    kg = env.unwrapped.kg
    env.reset(options={"index": 0})
    kg.add("Jack", "best_friend", "Zoe")  # during an episode: a new person and a never-seen relation
    kg.add("Zoe", "prefer_pickup_location", "pickup_location_0042")
    walk = reply(tool_call("kg_search", {"start": "Jack", "path": ["best_friend", "prefer_pickup_location"]}))
    observation = env.step(walk)[0]
    assert "pickup_location_0042" in observation["messages"][-1]["content"]
    observation, _ = env.reset(options={"index": 0})  # between episodes: the new relation has its own tool
    assert "kg_best_friend" in [t["function"]["name"] for t in observation["tools"]]
    assert (
        env.step(reply(tool_call("kg_best_friend", {"entity": "Jack"})))[0]["messages"][-1]["content"]
        == '["Zoe"]'
    )
    kg.remove("Jack", "best_friend", "Zoe")
    assert (
        env.step(reply(tool_call("kg_best_friend", {"entity": "Jack"})))[0]["messages"][-1]["content"] == "[]"
    )
    kg.add("Jack", "best_friend", "Zoe")
    full = FamilyToolEnv(variant="e", kg="full")
    full.kg.add("Jack", "best_friend", "Zoe")
    assert "[Jack, best_friend, Zoe]" in full.reset(options={"index": 0})[0]["messages"][1]["content"]
    extracting = FamilyToolEnv(variant="e", kg="extract")
    extracting.kg.add("Jack", "best_friend", "Zoe")
    assert "best_friend" in extracting.reset(options={"index": 0})[1]["relations"]
    search = "KG.search(start=Jack, path=[best_friend])"
    metrics = extracted_then(extracting, search, gold_reply(extracting.tasks[0]))[4]["metrics"]
    assert metrics["kg_no_hallucination"] == 1.0 and metrics["kg_f1"] == 0.0


def test_extraction_metrics_through_the_env_for_a_made_up_relation():
    env = FamilyToolEnv(variant="e", kg="extract")
    task = env.reset(options={"task_id": "KGMTUbench_0"})[1]
    text = "<think>KG.search(start=Jack, path=[father, favourite_pickup])</think>"
    metrics = extracted_then(env, text, gold_reply(env.tasks[0]))[4]["metrics"]
    out_degree = len(env.kg.out_edges("William"))  # greedy: the walked triple plus every edge of William
    assert task["task_id"] == "KGMTUbench_0"
    assert metrics["kg_f1"] == pytest.approx(2 * (2 / (out_degree + 1)) / (2 / (out_degree + 1) + 1))
    assert (metrics["kg_no_hallucination"], metrics["kg_coverage"], metrics["kg_em"]) == (0.0, 1.0, 0.0)
    env.reset(options={"task_id": "KGMTUbench_0"})
    unknown_start = extracted_then(env, "KG.search(start=Nobody, path=[father])", gold_reply(env.tasks[0]))
    assert unknown_start[4]["metrics"]["kg_format_error"] == 1.0
    assert unknown_start[4]["metrics"]["kg_no_hallucination"] is None


def test_retrieval_extraction_uses_the_injected_retriever():
    asked = []

    def retriever(relation, relations, k):
        asked.append((relation, k))
        return ["prefer_pickup_location"]

    env = FamilyToolEnv(variant="e", kg="extract", extraction="retrieval", retriever=retriever, top_k=2)
    env.reset(options={"task_id": "KGMTUbench_0"})
    text = "KG.search(start=Jack, path=[father, favourite_pickup_spot])"
    metrics = extracted_then(env, text, gold_reply(env.tasks[0]))[4]["metrics"]
    assert asked == [("favourite_pickup_spot", 2)]
    assert metrics["kg_em"] == 1.0 and metrics["kg_no_hallucination"] == 1.0


def test_bad_options_name_the_valid_values():
    with pytest.raises(ConfigError, match="gold, none, full, tools, extract"):
        FamilyToolEnv(kg="everything")
    with pytest.raises(ConfigError, match="exact, greedy, retrieval"):
        FamilyToolEnv(extraction="fuzzy")
    with pytest.raises(ConfigError, match="variant"):
        FamilyToolEnv(variant="x")
    with pytest.raises(ConfigError, match="module:function"):
        FamilyToolEnv(kg="extract", extraction="retrieval", retriever="no_such_module:f")
    with pytest.raises(ConfigError, match="used only with kg='extract', not kg='gold'"):
        FamilyToolEnv(extraction="retrieval")  # and no retriever model is loaded for nothing
    with pytest.raises(ConfigError, match="needs max_turns >= 2"):
        FamilyToolEnv(kg="extract", max_turns=1)
    with pytest.raises(ConfigError, match="only with extraction=retrieval"):
        FamilyToolEnv(kg="extract", retriever="m:f")
    with pytest.raises(ConfigError, match="top_k"):
        FamilyToolEnv(kg="extract", extraction="retrieval", retriever=lambda r, rs, k: rs[:k], top_k=0)


def test_extract_mode_turns_the_search_text_into_the_tool_use_prompt():
    env = FamilyToolEnv(variant="e", kg="extract")
    observation, info = env.reset(options={"task_id": "KGMTUbench_0"})
    query = observation["messages"][1]["content"]
    assert query == bare_query(env.tasks[0]) and info["relations"] == env.kg.relations()
    assert "father" in info["relations"] and "extraction" not in info
    search = "<think>the father</think>KG.search(start=Jack, path=[father, prefer_pickup_location])"
    observation, _, _, _, info = env.step(search)
    subkg = "([['Jack', 'father', 'William'], ['William', 'prefer_pickup_location', 'pickup_location_0007']])"
    assert observation["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{query} {EXTRA_INFO_MARKER} {subkg}."},
    ]
    assert info["extraction"] == {
        "subkg": subkg,
        "calls": [{"start": "Jack", "path": ["father", "prefer_pickup_location"]}],
    }
    assert "relations" not in info and info["turn"] == 1 and info["calls"] == []
    _, reward, terminated, _, info = env.step(gold_reply(env.tasks[0]))
    assert terminated and reward == 1.0 and info["turn"] == 2
    assert info["metrics"]["kg_em"] == 1.0 and info["metrics"]["kg_format_error"] == 0.0


def fixed_retriever(relation, relations, k):
    return ["prefer_pickup_location"]


def test_an_extracting_env_copies_with_its_retriever():
    spec = f"{__name__}:fixed_retriever"
    env = FamilyToolEnv(variant="e", kg="extract", extraction="retrieval", retriever=spec)
    env.reset(options={"task_id": "KGMTUbench_0"})
    twin = pickle.loads(pickle.dumps(env))
    assert twin.retriever is fixed_retriever
    text = "KG.search(start=Jack, path=[father, favourite_pickup_spot])"
    metrics = extracted_then(twin, text, gold_reply(twin.tasks[0]))[4]["metrics"]
    assert metrics["kg_em"] == 1.0


def test_the_old_kg_extraction_action_field_is_refused_with_the_new_way():
    env = FamilyToolEnv(variant="e", kg="extract")
    env.reset(options={"index": 0})
    with pytest.raises(ActionError, match=r"'kg_extraction' is gone.*kg='extract'"):
        env.step({"role": "assistant", "content": "", "kg_extraction": 'KG.search(start="Jack", path=[])'})
    env.close()
