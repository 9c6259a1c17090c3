"""Answer correctness for ToolHop: the official rule (two clauses) and a stricter normalized match.

A scorer sees the episode's messages, the final assistant message last: the official rule may also read
the tool message before it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from hopgym.options import check_choice


def official_match(gold: str, response: str) -> bool:
    """The official substring test, quirks included for comparability with published numbers.

    ``gold.rstrip(".0").lower()`` must be a substring of ``response.rstrip(".0").replace(",", "").lower()``
    (the official expression, in its order). Quirks: gold "0" strips to "" and matches any response; "10"
    becomes "1" (so "1" or "21" match); "2.50" becomes "2.5"; substrings count ("1" matches "1302").
    """
    return str(gold).rstrip(".0").lower() in str(response).rstrip(".0").replace(",", "").lower()


def _final_content(messages: Sequence[Mapping[str, Any]]) -> str:
    final = messages[-1] if messages else {}
    content = final.get("content") if final.get("role") == "assistant" else None
    return content if isinstance(content, str) else ""


def official_answer_correct(gold: str, messages: Sequence[Mapping[str, Any]]) -> bool:
    """The official verdict: the test on the final assistant message; when it fails and the message before
    is a tool message, the same test on that message. An empty or missing final answer is never correct
    (the official code leaves such an episode unscored, which counts as wrong)."""
    final = _final_content(messages)
    if not final:
        return False
    if official_match(gold, final):
        return True
    previous = messages[-2] if len(messages) >= 2 else {}
    return previous.get("role") == "tool" and official_match(gold, str(previous.get("content") or ""))


_TOKEN = re.compile(r"\d+(?:\.\d+)?|[^\W\d_]+")


def _canonical_number(token: str) -> str:
    try:
        number = Decimal(token)
    except InvalidOperation:
        return token
    text = format(number.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def normalize_tokens(text: str) -> list[str]:
    """Lower-cased, accent-free words and canonical numbers ("1,302" -> "1302", "15.0" -> "15")."""
    decomposed = unicodedata.normalize("NFKD", str(text).lower())
    without_accents = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    without_grouping = re.sub(r"(?<=\d),(?=\d{3}\b)", "", without_accents)
    return [_canonical_number(tok) if tok[0].isdigit() else tok for tok in _TOKEN.findall(without_grouping)]


def normalized_match(gold: str, response: str) -> bool:
    """The gold answer's tokens appear as a contiguous run of whole tokens in the response.

    No quirks: "0" needs a "0" token, "10" does not match "1" or "100", "1" does not match "1302".
    """
    gold_tokens = normalize_tokens(gold)
    if not gold_tokens:
        return False
    tokens = normalize_tokens(response)
    width = len(gold_tokens)
    return any(tokens[i : i + width] == gold_tokens for i in range(len(tokens) - width + 1))


def normalized_answer_correct(gold: str, messages: Sequence[Mapping[str, Any]]) -> bool:
    """The normalized match on the final assistant message alone."""
    return normalized_match(gold, _final_content(messages))


Scorer = Callable[[str, Sequence[Mapping[str, Any]]], bool]
"""(gold answer, the episode's messages ending with the final assistant message) -> correct."""

SCORERS: dict[str, Scorer] = {"official": official_answer_correct, "normalized": normalized_answer_correct}


def episode_correct(scorer: Scorer, official: bool, gold: str, messages: Sequence[Mapping[str, Any]]) -> bool:
    """An ended episode's verdict: the official protocol's rule may read the tool message before the
    answer; under the hopgym protocol that message is hopgym's own text, which the official code never
    shows, so the answer alone is scored. (``hopgym rescore`` applies the same rule to saved messages.)"""
    return scorer(gold, messages if official else messages[-1:])


def get_scorer(name: str) -> Scorer:
    """The scorer called ``name``; a clear error lists the valid names."""
    return SCORERS[check_choice("scorer", name, tuple(sorted(SCORERS)))]
