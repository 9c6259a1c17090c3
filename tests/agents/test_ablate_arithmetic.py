"""Table 5 arithmetic (agents/evaluation/feedback_flips.py) pinned on hand-made episode records."""

from __future__ import annotations

import pytest

from hopgym.agents.evaluation.feedback_flips import feedback_flips, has_erroneous_call
from hopgym.agents.evaluation.records import EpisodeRecord
from hopgym.errors import ConfigError


def episode(task_id: str, correct: bool, *statuses: str, error: str | None = None) -> EpisodeRecord:
    calls = [{"status": status, "errors": [] if status == "ok" else [status]} for status in statuses]
    return EpisodeRecord(task_id=task_id, correct=correct, calls=calls, error=error)


# (detailed, minimal) per task
DETAILED = [
    episode("a", True, "tool_hallucination", "ok"),  # C -> I
    episode("b", True, "parameter_missing"),  # C -> I
    episode("c", False, "parameter_hallucination"),  # I -> C
    episode("d", True, "tool_hallucination"),  # C -> C
    episode("e", False, "tool_hallucination"),  # I -> I
    episode("f", True, "tool_error"),  # failed call, not an invocation error: C -> I
    episode("g", True, "ok"),  # no error at all: C -> I, never counted
    episode("h", True, "tool_hallucination"),  # its minimal episode ended in a runner error
    episode("i", True, "tool_hallucination"),  # missing from the minimal run
]
MINIMAL = [
    episode("a", False, "tool_hallucination"),
    episode("b", False),
    episode("c", True),
    episode("d", True, "ok"),
    episode("e", False),
    episode("f", False, "tool_error"),
    episode("g", False),
    episode("h", False, error="ModelError: gave up"),
]


def test_invocation_errors_select_five_queries_and_the_deltas_are_shares_of_them() -> None:
    flips = feedback_flips(DETAILED, MINIMAL)
    assert (flips.queries, flips.correct_with, flips.correct_without) == (5, 3, 2)
    assert (flips.correct_to_incorrect, flips.incorrect_to_correct, flips.unpaired) == (2, 1, 2)
    assert flips.table5() == {
        "with_feedback": 0.6,
        "without_feedback": 0.4,
        "delta_c_to_i": 0.4,
        "delta_i_to_c": 0.2,
    }
    rates = flips.table5()
    assert rates["with_feedback"] - rates["without_feedback"] == pytest.approx(
        rates["delta_c_to_i"] - rates["delta_i_to_c"]
    )


def test_the_failed_error_set_also_counts_tool_errors() -> None:
    flips = feedback_flips(DETAILED, MINIMAL, error_set="failed")
    assert (flips.queries, flips.correct_with, flips.correct_without) == (6, 4, 2)
    assert (flips.correct_to_incorrect, flips.incorrect_to_correct) == (3, 1)


def test_no_qualifying_query_gives_none_not_a_division_by_zero() -> None:
    flips = feedback_flips([episode("g", True, "ok")], [episode("g", False)])
    assert flips.queries == 0 and set(flips.table5().values()) == {None}


def test_an_error_type_listed_beside_another_status_counts() -> None:
    call = {"status": "invalid_arguments", "errors": ["invalid_arguments", "parameter_missing"]}
    assert has_erroneous_call(EpisodeRecord(task_id="t", calls=[call]), "invocation")
    with pytest.raises(ConfigError, match="unknown error set"):
        has_erroneous_call(EpisodeRecord(task_id="t", calls=[call]), "all")
