"""The paper's Table 5 arithmetic: how answer correctness changes from detailed to minimal feedback on the
queries whose detailed-feedback episode made an erroneous call.

Episodes of the two runs are paired by ``task_id`` and ``sample``; a pair is used when neither episode
ended with a runner ``error`` and the detailed one has an erroneous call. With N such pairs,
``with_feedback`` is the correct fraction under detailed feedback, ``without_feedback`` under minimal
feedback, ``delta_c_to_i`` the fraction of the N that were correct with feedback and incorrect without, and
``delta_i_to_c`` the reverse; so ``with - without = ΔC→I - ΔI→C``, as in the paper's Table 5.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hopgym.agents.evaluation.records import EpisodeRecord
from hopgym.envs.calls import INVOCATION_ERROR_TYPES
from hopgym.errors import ConfigError

ERROR_SETS = ("invocation", "failed")
"""``invocation``: a call with a Table 4 invocation error (tool hallucination, parameter hallucination,
parameter missing), the caption's definition; ``failed``: any call whose status is not ``ok`` (also
invalid arguments, tool errors, timeouts), the calls for which feedback differs between the modes."""


def has_erroneous_call(record: EpisodeRecord, error_set: str = "invocation") -> bool:
    """Whether an episode record holds a call of the given error set."""
    if error_set not in ERROR_SETS:
        raise ConfigError(f"unknown error set {error_set!r}; valid: {list(ERROR_SETS)}")
    for call in record.calls:
        if error_set == "failed" and call.get("status", "ok") != "ok":
            return True
        kinds = {call.get("status"), *(call.get("errors") or ())}
        if error_set == "invocation" and kinds & set(INVOCATION_ERROR_TYPES):
            return True
    return False


@dataclass(frozen=True)
class FeedbackFlips:
    """Counts over the paired queries with an erroneous call under detailed feedback."""

    queries: int
    correct_with: int
    correct_without: int
    correct_to_incorrect: int
    incorrect_to_correct: int
    unpaired: int
    """Tasks of the detailed run left out: missing from the minimal run, or an episode ended in error."""

    def _rate(self, count: int) -> float | None:
        return count / self.queries if self.queries else None

    def table5(self) -> dict[str, float | None]:
        """The Table 5 columns as fractions (``None`` when no query qualifies)."""
        return {
            "with_feedback": self._rate(self.correct_with),
            "without_feedback": self._rate(self.correct_without),
            "delta_c_to_i": self._rate(self.correct_to_incorrect),
            "delta_i_to_c": self._rate(self.incorrect_to_correct),
        }


def feedback_flips(
    detailed: Iterable[EpisodeRecord], minimal: Iterable[EpisodeRecord], error_set: str = "invocation"
) -> FeedbackFlips:
    """Pair the two runs' episodes and count the correctness flips (see the module docstring)."""
    minimal_by_key = {record.key: record for record in minimal}
    pairs = []
    unpaired = 0
    for record in detailed:
        other = minimal_by_key.get(record.key)
        if other is None or record.error is not None or other.error is not None:
            unpaired += 1
            continue
        if has_erroneous_call(record, error_set):
            pairs.append((record.correct, other.correct))
    return FeedbackFlips(
        queries=len(pairs),
        correct_with=sum(with_ for with_, _ in pairs),
        correct_without=sum(without for _, without in pairs),
        correct_to_incorrect=sum(with_ and not without for with_, without in pairs),
        incorrect_to_correct=sum(without and not with_ for with_, without in pairs),
        unpaired=unpaired,
    )
