"""The official ToolHop answer rule (quirks included) and the stricter normalized scorer."""

from __future__ import annotations

import pytest

from hopgym.envs.toolhop.scoring import (
    get_scorer,
    normalize_tokens,
    normalized_answer_correct,
    normalized_match,
    official_answer_correct,
    official_match,
)
from hopgym.errors import ConfigError


@pytest.mark.parametrize(
    ("gold", "response", "expected"),
    [
        ("15", "The sum of the digits is 15.", True),
        ("John II of Brienne", "It was JOHN II OF BRIENNE, Count of Eu", True),
        ("1302", "the year 1,302", True),
        ("Paris", "London", False),
        ("3.", "3 letters", True),  # trailing '.' stripped from gold
        ("2.50", "about 2.5", True),
    ],
)
def test_official_rule(gold, response, expected):
    assert official_match(gold, response) is expected


def test_official_quirks_are_kept():
    assert official_match("0", "I have no idea")  # "0" strips to "" which is in every string
    assert official_match("10", "the answer is 1")  # "10" becomes "1"
    assert official_match("10", "21")
    assert official_match("100", "1")
    assert official_match("1", "1302")  # substring, not token, match


def test_official_gold_comma_is_not_removed():
    # Commas are removed from the response only, so a gold answer with a comma never matches.
    assert not official_match("1,302", "the year 1,302")
    assert not official_match("1,302", "the year 1302")


@pytest.mark.parametrize(
    ("gold", "response", "expected"),
    [
        ("0", "I have no idea", False),
        ("0", "The count is 0.", True),
        ("10", "the answer is 1", False),
        ("10", "the answer is 10.", True),
        ("10", "100", False),
        ("1", "1302", False),
        ("15", "15.0", True),
        ("1,302", "in 1302", True),
        ("Chloë Agnew", "chloe agnew!", True),
        ("John II of Brienne", "Answer: John II of Brienne, Count of Eu", True),
        ("John II of Brienne", "John of Brienne II", False),
        ("", "anything", False),
    ],
)
def test_normalized_rule(gold, response, expected):
    assert normalized_match(gold, response) is expected


def test_normalize_tokens():
    assert normalize_tokens("Café, 1,302 and 2.50!") == ["cafe", "1302", "and", "2.5"]


def test_scorer_lookup():
    assert get_scorer("official") is official_answer_correct
    assert get_scorer("normalized") is normalized_answer_correct
    with pytest.raises(ConfigError, match="unknown scorer"):
        get_scorer("fuzzy")


def _episode(*contents):
    """An episode's last messages: ``("tool", text)`` pairs and the final assistant content last."""
    *before, final = contents
    return [{"role": role, "content": text} for role, text in before] + [
        {"role": "assistant", "content": final}
    ]


def test_official_verdict_reads_the_tool_message_before_the_answer():
    assert official_answer_correct("Paris", _episode(("tool", '"Paris"'), "I could not tell."))
    assert not official_answer_correct("Paris", _episode(("user", "Paris?"), "I could not tell."))
    assert not official_answer_correct("Paris", _episode(("tool", '"Rome"'), "I could not tell."))
    assert official_answer_correct("Paris", _episode(("tool", '"Rome"'), "It is Paris."))


def test_official_verdict_never_accepts_an_empty_answer():
    # Gold "0" strips to "" and matches any text, but an empty final message is left unscored officially.
    assert official_answer_correct("0", _episode("anything"))
    for empty in ("", None):
        assert not official_answer_correct("0", _episode(("tool", "0"), empty))
        assert not normalized_answer_correct("0", _episode(empty))
