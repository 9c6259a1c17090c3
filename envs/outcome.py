"""How an episode ended, or that it did not: the one rule eval records, training records and the verifiers
adapters read "ended", "correct", the reward and the metrics by, built from the episode's last step.

An episode that did not end (the token budget or an error stopped it) or ended truncated (``max_turns``
spent, ToolHop's official protocol stopping) was not answered, so it is not correct: ``correct`` is
``False``, never ``None``, as a run's answer correctness counts it; its reward is 0.0 and its ``metrics``
``None`` (none were taken). Only a terminated step carries the env's ``correct`` and ``metrics``
(docs/contracts.md "info").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, SupportsFloat, TypedDict


class OutcomeFields(TypedDict):
    """An outcome as the plain keys records hold (training records, the verifiers state; an episode
    record has the same keys but ``ended``)."""

    reward: float
    """The env's reward of the episode: its final step's; 0.0 when it did not end."""
    terminated: bool
    truncated: bool
    ended: bool
    """Terminated or truncated."""
    correct: bool
    """The terminal ``info["correct"]``; False when the episode did not terminate."""
    metrics: dict[str, Any] | None
    """The terminal ``info["metrics"]``; None when the episode did not terminate."""


@dataclass(frozen=True)
class Outcome:
    """An episode's ending (see the module docstring); :data:`NOT_ENDED` before its last step."""

    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    correct: bool = False
    metrics: Mapping[str, Any] | None = None
    """The terminal ``info["metrics"]``; None unless the episode terminated."""

    @property
    def ended(self) -> bool:
        return self.terminated or self.truncated

    @classmethod
    def of_step(
        cls, reward: SupportsFloat, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> Outcome:
        """The outcome after a step that returned ``(reward, terminated, truncated, info)``."""
        ended = bool(terminated or truncated)
        metrics = info.get("metrics") if terminated else None
        return cls(
            reward=float(reward) if ended else 0.0,
            terminated=bool(terminated),
            truncated=bool(truncated),
            correct=bool(terminated) and bool(info.get("correct", False)),
            metrics=dict(metrics) if isinstance(metrics, Mapping) else None,
        )

    @classmethod
    def of_fields(cls, fields: Mapping[str, Any]) -> Outcome:
        """The outcome a record holds (:meth:`fields`, or an episode record's JSON), by the same rule: a
        record that says correct but did not terminate is not correct."""
        terminated = fields.get("terminated") is True
        return cls.of_step(
            fields.get("reward") or 0.0,
            terminated,
            fields.get("truncated") is True,
            {"correct": fields.get("correct"), "metrics": fields.get("metrics")} if terminated else {},
        )

    def fields(self) -> OutcomeFields:
        return {
            "reward": self.reward,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "ended": self.ended,
            "correct": self.correct,
            "metrics": None if self.metrics is None else dict(self.metrics),
        }


NOT_ENDED = Outcome()
"""The outcome of an episode before its last step (or of one that never got one)."""
