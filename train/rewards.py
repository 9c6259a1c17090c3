"""Reward functions for ``GRPOTrainer``, each computed from the env's ``info`` only.

TRL calls a reward function with the rollout's extra fields as keywords; :mod:`hopgym.train.rollout`
returns each completion's :class:`~hopgym.train.rollout.TrainEpisode` under ``hopgym``. Two rewards:

- :func:`env_reward`: the env's own reward of the episode (its official scoring: 1.0 for a correct final
  answer, else 0.0; 0.0 for an episode the token budget cut before it ended).
- :class:`ShapedReward`: ``format_weight * format + mean(call_weights[status]) + correct_weight * reward``.
  ``format`` is 1.0 when a turn of the episode was a well-formed tool call (a reply that ended with its
  end-of-turn token and parsed into valid tool calls), else 0.0: as in ToolRL (arXiv 2504.13958) and
  Tool-N1, only the call format earns, so a model cannot collect it by answering at once without a call
  (a plain answer earns only through ``reward``). The call term averages, over every call the env
  recorded, the weight of its ``status`` (``ok``, each invocation-error type, ``tool_error``, ...:
  docs/contracts.md "Call records"), 0.0 without calls; ``reward`` is the env's reward. Format and valid
  calls give a small model a gradient long before its answers are right; correctness still dominates
  (weight 1.0 against at most 0.2 + 0.5).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hopgym.envs.calls import CALL_STATUSES, CallStatus
from hopgym.errors import ConfigError
from hopgym.train.rollout import RECORD_FIELD, TrainEpisode

DEFAULT_CALL_WEIGHTS: Mapping[CallStatus, float] = {
    "ok": 0.5,
    "tool_error": 0.0,
    "timeout": 0.0,
    "resource_limit": 0.0,
    "tool_hallucination": -0.5,
    "parameter_hallucination": -0.25,
    "parameter_missing": -0.25,
    "invalid_arguments": -0.25,
}
"""A call the tool accepted earns; an invocation error (the paper's Table 4 types, and bad arguments)
costs; a tool's own failure, timeout or resource limit is neither (ToolHop's tools fail on some valid
inputs)."""


def episode_records(kwargs: Mapping[str, Any]) -> Sequence[TrainEpisode]:
    """The episode records TRL passed to a reward function."""
    records = kwargs.get(RECORD_FIELD)
    if records is None:
        raise ConfigError(
            f"no {RECORD_FIELD!r} records: use hopgym.train.rollout.HopgymRollout as rollout_func"
        )
    return records


def env_reward(**kwargs: Any) -> list[float]:
    """The env's reward of each completion's episode (the official scoring)."""
    return [record["reward"] for record in episode_records(kwargs)]


class ShapedReward:
    """The documented shaped reward (module docstring); every weight is an argument."""

    __name__ = "shaped_reward"  # TRL names a reward function's log column after it

    def __init__(
        self,
        format_weight: float = 0.2,
        call_weights: Mapping[str, float] | None = None,
        correct_weight: float = 1.0,
    ) -> None:
        unknown = sorted(set(call_weights or {}) - set(CALL_STATUSES))
        if unknown:
            raise ConfigError(f"call weights for unknown statuses {unknown}; statuses: {list(CALL_STATUSES)}")
        weights: dict[str, float] = dict([*DEFAULT_CALL_WEIGHTS.items(), *(call_weights or {}).items()])
        self.format_weight = format_weight
        self.call_weights = weights
        self.correct_weight = correct_weight

    def terms(self, record: TrainEpisode) -> dict[str, float]:
        """The three terms of one episode, unweighted but for the calls' per-status weights."""
        turns = record["turns"]
        statuses = [call["status"] for turn in turns for call in turn["calls"]]
        return {
            "format": float(any(turn["well_formed"] and isinstance(turn["action"], dict) for turn in turns)),
            "calls": sum(self.call_weights[s] for s in statuses) / len(statuses) if statuses else 0.0,
            "correct": record["reward"],
        }

    def score(self, record: TrainEpisode) -> float:
        terms = self.terms(record)
        return self.format_weight * terms["format"] + terms["calls"] + self.correct_weight * terms["correct"]

    def __call__(self, **kwargs: Any) -> list[float]:
        return [self.score(record) for record in episode_records(kwargs)]


REWARDS = ("env", "shaped")
"""The reward names ``hopgym train grpo --reward`` takes."""


def reward_function(name: str, shaped: ShapedReward | None = None) -> Any:
    """The reward function called ``name`` (``env`` or ``shaped``)."""
    if name == "env":
        return env_reward
    if name == "shaped":
        return shaped or ShapedReward()
    raise ConfigError(f"unknown reward {name!r}; rewards: {', '.join(REWARDS)}")
