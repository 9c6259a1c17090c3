"""``hopgym.envs.outcome.Outcome``: one rule for "ended", "correct", the reward and the metrics from an
episode's last step, read back the same from every record shape; and errors kept as data beside their text
(``hopgym.errors.error_detail``), in rollouts and in episode records, old records still loading."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from hopgym.agents.evaluation.records import EpisodeRecord
from hopgym.envs.outcome import NOT_ENDED, Outcome
from hopgym.errors import FIELD_CHARS, EnvServerError, ModelError, error_detail, error_text
from hopgym.serving.rollouts import Rollout, Rollouts

TERMINAL = {"correct": True, "metrics": {"f1": 0.5}, "calls": []}


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ((1.0, True, False, TERMINAL), (1.0, True, True, {"f1": 0.5})),
        ((0.0, True, False, {**TERMINAL, "correct": False}), (0.0, True, False, {"f1": 0.5})),
        ((0.0, False, True, {"calls": []}), (0.0, True, False, None)),  # max_turns spent
        ((0.0, False, True, TERMINAL), (0.0, True, False, None)),  # a truncated step is never correct
        ((0.0, False, False, {"calls": []}), (0.0, False, False, None)),  # the budget or an error stopped it
        ((0.7, False, False, TERMINAL), (0.0, False, False, None)),  # an unended episode earns nothing
        (
            (1.0, True, False, {"metrics": [1]}),
            (1.0, True, False, None),
        ),  # off-contract: no correct, metrics no dict
    ],
)
def test_an_outcome_of_a_step_follows_the_one_rule(step: tuple[Any, ...], expected: tuple[Any, ...]) -> None:
    outcome = Outcome.of_step(*step)
    assert (outcome.reward, outcome.ended, outcome.correct, outcome.metrics) == expected
    assert Outcome.of_fields(outcome.fields()) == outcome
    assert json.loads(json.dumps(outcome.fields())) == outcome.fields()


def test_an_outcome_read_back_from_a_record_applies_the_same_rule() -> None:
    assert Outcome.of_fields({}) == NOT_ENDED and not NOT_ENDED.ended and NOT_ENDED.correct is False
    says_correct_unended = {"reward": 1.0, "terminated": False, "truncated": False, "correct": True}
    assert Outcome.of_fields(says_correct_unended) == NOT_ENDED
    assert Outcome.of_fields({"terminated": "true", "correct": True, "reward": 1}) == NOT_ENDED


def test_an_episode_record_reads_its_outcome_and_keeps_an_error_as_data() -> None:
    try:
        raise EnvServerError("every env server failed the episode")
    except EnvServerError as exc:
        caught = exc
    caught.urls = ["http://127.0.0.1:1"]  # type: ignore[attr-defined] - a field as OpenEnv's errors carry
    detail = error_detail(caught)
    assert detail == {
        "type": "EnvServerError",
        "module": "hopgym.errors",
        "message": "every env server failed the episode",
        "fields": {"urls": ["http://127.0.0.1:1"]},
    }
    record = EpisodeRecord(task_id="t", error=error_text(caught), error_detail=detail, turns=1)
    assert record.to_json()["error"] == "EnvServerError: every env server failed the episode"
    again = EpisodeRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert again == record and again.outcome == NOT_ENDED
    old = {"task_id": "t", "reward": 1.0, "correct": True, "terminated": True, "error": None}
    assert (
        EpisodeRecord.from_json(old).error_detail is None
        and "error_detail" not in EpisodeRecord.from_json(old).to_json()
    )
    assert EpisodeRecord.from_json(old).outcome == Outcome(reward=1.0, terminated=True, correct=True)
    with pytest.raises(ValueError, match="its error_detail is a JSON str"):
        EpisodeRecord.from_json({**old, "error_detail": "ModelError: boom"})


def test_an_error_detail_keeps_only_public_json_fields_of_bounded_size() -> None:
    error = ModelError("the model server crashed")
    error.status_code = 500  # type: ignore[attr-defined]
    error.body = {"message": "x" * FIELD_CHARS}  # type: ignore[attr-defined] - too long to keep
    error.response = object()  # type: ignore[attr-defined] - not JSON
    error._private = 1  # type: ignore[attr-defined]
    error.ratio = float("nan")  # type: ignore[attr-defined] - not strict JSON
    assert error_detail(error)["fields"] == {"status_code": 500}
    assert error_detail(ValueError("bad"))["module"] == "builtins"


def test_a_rollout_that_failed_keeps_the_errors_class_and_its_outcome_is_unended() -> None:
    """A real env episode whose policy's model fails after one turn: the rollout keeps the error as text
    and data, its outcome is not ended and not correct, and the pool's next episode plays to its end."""

    async def failing(observation: Any, info: Any) -> Any:
        if info["turn"] >= 1:
            raise ModelError("gave up after 2 attempts")
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"name": "no_such_tool", "arguments": {}}],
        }

    async def answering(observation: Any, info: Any) -> str:
        return "Final answer: nothing"

    async def scenario() -> tuple[Rollout, Rollout]:
        async with Rollouts("ToolHop-v0", concurrency=1) as rollouts:
            failed = await rollouts.episode(failing, {"index": 0})
            return failed, await rollouts.episode(answering, {"index": 0})

    failed, after = asyncio.run(scenario())
    assert failed.error == "ModelError: gave up after 2 attempts" and failed.turns == 1
    assert failed.error_detail is not None and failed.error_detail["type"] == "ModelError"
    assert failed.outcome == NOT_ENDED and failed.calls[0]["status"] == "tool_hallucination"
    assert after.error is None and after.outcome.terminated and after.outcome.correct is False
