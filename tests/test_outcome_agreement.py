"""One episode outcome across the three ways hopgym plays an episode: the same scripted replies through the
eval runner (``EpisodeRecord``), GRPO's rollout function (``TrainEpisode``, TRL's own parser and tool-result
tokens on the local model's tokenizer) and the legacy verifiers adapter (its rubric's state), on real ToolHop
tasks in the real sandbox, read "ended" and "correct" from :class:`~hopgym.envs.outcome.Outcome` and agree:
an answer right and one wrong, an episode cut off unfinished by ``max_turns``, and one stopped by an error
(the model failing in eval and verifiers; its completion's token budget spent in training, where a model
failure ends the whole step)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.extras import TORCH_GROUP, require_extra

require_extra("verifiers", "verifiers")
require_extra("trl", "train")

from hopgym.agents.evaluation.records import read_episodes  # noqa: E402
from hopgym.agents.evaluation.runner import EvalConfig, EvalRun  # noqa: E402
from hopgym.agents.model.client import ModelConfig  # noqa: E402
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply, tool_call  # noqa: E402
from hopgym.envs.outcome import Outcome  # noqa: E402
from hopgym.serving.rollouts import Rollouts  # noqa: E402
from tests.scripted_runs import TASKS, question_of  # noqa: E402
from tests.scripted_trainer import ScriptedTrainer  # noqa: E402

pytestmark = pytest.mark.xdist_group(TORCH_GROUP)
ENV_KWARGS = {"max_turns": 2}
KINDS = ("right", "wrong", "cut_off", "errored")
"""What the script does on task ``i``: a call then the gold answer, a call then a wrong answer, calls until
``max_turns`` is spent, a call then a failure."""
BUDGET = 600
"""A completion's tokens in training: room for every episode's turns but the errored one's."""
EXPECTED = {
    "right": Outcome(reward=1.0, terminated=True, correct=True, metrics={}),
    "wrong": Outcome(reward=0.0, terminated=True, correct=False, metrics={}),
    "cut_off": Outcome(truncated=True),
    "errored": Outcome(),
}


class Script:
    """The replies of every episode: ``reply(index, turn)`` is a call ``(name, arguments, text before
    it)``, an answer text, or None (the model fails)."""

    def __init__(self, tokenizer: Any) -> None:
        self.padding = ""
        name, arguments, _ = self.reply(3, 0)
        call = self.call_text(name, arguments)
        words = BUDGET - len(tokenizer(call, add_special_tokens=False)["input_ids"]) - 8
        while (
            len(
                tokenizer(self.call_text(name, arguments, " ok" * words), add_special_tokens=False)[
                    "input_ids"
                ]
            )
            > BUDGET - 4
        ):
            words -= 1
        self.padding = " ok" * words

    def reply(self, index: int, turn: int) -> tuple[str, dict[str, Any], str] | str | None:
        task, kind = TASKS[index], KINDS[index]
        if turn == 0 or kind == "cut_off":
            function = task.tools[0]["function"]
            arguments = {name: "x" for name in function["parameters"].get("required", [])}
            return function["name"], arguments, self.padding if kind == "errored" else ""
        if kind == "errored":
            return None
        return f"Final answer: {task.answer if kind == 'right' else 'I do not know'}"

    @staticmethod
    def call_text(name: str, arguments: dict[str, Any], before: str = "") -> str:
        call = json.dumps({"name": name, "arguments": arguments})
        return f"{before}<tool_call>\n{call}\n</tool_call><|im_end|>"


def index_of_question(text: str) -> int:
    return next(i for i, task in enumerate(TASKS[: len(KINDS)]) if task.question in text)


def eval_outcomes(script: Script, out: Path) -> dict[int, tuple[Outcome, Any]]:
    def policy(request: dict[str, Any]) -> ScriptedReply:
        index = index_of_question(question_of(request))
        reply = script.reply(index, sum(m["role"] == "tool" for m in request["messages"]))
        if reply is None:
            return ScriptedReply(status=500)
        if isinstance(reply, str):
            return ScriptedReply(content=reply)
        name, arguments, before = reply
        return ScriptedReply(content=before or None, tool_calls=(tool_call(name, arguments),))

    with ScriptedModelServer(policy) as server:
        model = ModelConfig(server.model, api_base=server.api_base, api_key="sk", max_retries=0)
        config = EvalConfig(out=out, model=model, env_kwargs=ENV_KWARGS, limit=len(KINDS), progress=False)
        EvalRun(config).run()
    return {record.index: (record.outcome, record) for record in read_episodes(out / "episodes.jsonl")}


def training_outcomes(script: Script, tokenizer: Any) -> dict[int, tuple[Outcome, Any]]:
    import gymnasium as gym

    from hopgym.train.dataset import task_dataset
    from hopgym.train.rollout import HopgymRollout

    env = gym.make("ToolHop-v0", **ENV_KWARGS)
    try:
        dataset = task_dataset(env, range(len(KINDS)))
    finally:
        env.close()

    def reply(prompt: str) -> str:
        answer = script.reply(index_of_question(prompt), prompt.count("<tool_response>"))
        assert answer is not None, "the errored episode's budget ends it before its model would fail"
        return f"{answer}<|im_end|>" if isinstance(answer, str) else script.call_text(*answer)

    rollout = HopgymRollout(Rollouts("ToolHop-v0", ENV_KWARGS, concurrency=len(KINDS)), tokenizer)
    try:
        output = rollout(list(dataset["prompt"]), ScriptedTrainer(tokenizer, reply, BUDGET))
    finally:
        rollout.close()
    return {i: (Outcome.of_fields(record), record) for i, record in enumerate(output["hopgym"])}


def verifiers_outcomes(script: Script) -> dict[int, tuple[Outcome, Any]]:
    import verifiers as vf

    from hopgym.serving.verifiers_common import episode_columns
    from hopgym.serving.verifiers_env import EPISODE, HopgymEnv

    async def play(env: HopgymEnv, index: int) -> tuple[Outcome, Any]:
        state = vf.State(trajectory_id=f"t{index}", info={"index": index})
        await env.setup_state(state)
        try:
            for turn in range(3):
                reply = script.reply(index, turn)
                if reply is None:  # the model failed: verifiers ends the rollout, the env said nothing more
                    break
                if isinstance(reply, str):
                    message = vf.AssistantMessage(content=reply)
                else:
                    name, arguments, before = reply
                    call = vf.ToolCall(id=f"call_{turn}", name=name, arguments=json.dumps(arguments))
                    message = vf.AssistantMessage(content=before or None, tool_calls=[call])
                await env.env_response([message], state)
                if Outcome.of_fields(state[EPISODE]).ended:
                    break
        finally:
            await env.give_back_env(state)
        return Outcome.of_fields(state[EPISODE]), episode_columns(state[EPISODE])

    async def scenario() -> dict[int, tuple[Outcome, Any]]:
        env = HopgymEnv(Rollouts("ToolHop-v0", ENV_KWARGS, concurrency=1))
        try:
            return {index: await play(env, index) for index in range(len(KINDS))}
        finally:
            await env.close_envs()

    return asyncio.run(scenario())


def test_eval_training_and_verifiers_read_one_outcome_of_the_same_replies(tmp_path: Path) -> None:
    from hopgym.train.model import load_tokenizer

    tokenizer = load_tokenizer("local")
    script = Script(tokenizer)
    evaluated = eval_outcomes(script, tmp_path / "run")
    trained = training_outcomes(script, tokenizer)
    scored = verifiers_outcomes(script)
    for index, kind in enumerate(KINDS):
        outcomes = [evaluated[index][0], trained[index][0], scored[index][0]]
        assert outcomes == [EXPECTED[kind]] * 3, kind
        record, train_record, columns = evaluated[index][1], trained[index][1], scored[index][1]
        assert record.correct is train_record["correct"] is EXPECTED[kind].correct, kind
        assert train_record["ended"] is EXPECTED[kind].ended and columns["answer_correctness"] == float(
            EXPECTED[kind].correct
        )
    errored = evaluated[KINDS.index("errored")][1]
    assert errored.error.startswith("ModelError: ") and errored.turns == 1
    assert errored.error_detail["type"] == "ModelError" and errored.error_detail["module"] == "hopgym.errors"
    assert [record[1].error for i, record in evaluated.items() if KINDS[i] != "errored"] == [None] * 3
    assert len(trained[KINDS.index("errored")][1]["turns"]) == 1  # its call ran; the budget ended it
