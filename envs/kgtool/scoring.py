"""Scoring a KG2Tool final answer: a set of entity names against the gold set of entity ids.

The agent answers with names (one per line, or a JSON list of strings; the env also accepts the entity ids
its tools return, turning each into its name); the gold answers are entity ids (Freebase mids for
FB15k-237, names for the family KG). A name shared by several entities counts for any of them, so the
comparison runs on names: reward 1.0 exactly when the named set equals the set of the gold
answers' names. Precision is over the distinct names given, recall over the gold entities (an entity is
found when its name was given), F1 their harmonic mean; ``hits@1`` says whether the first name given is a
gold answer's name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hopgym.model_text import SPACE as S
from hopgym.model_text import linear, parsed_text

_BULLET = re.compile(r"^\s*(?:[-*\u2022]\s+)")
# RE2 (linear time): Python's re took cubic time on a fence and thousands of newlines.
_FENCE = linear(rf"{S}*```(?:json)?{S}*\n((?s:.*?))\n{S}*```{S}*\z")


def parse_answer_names(text: str | None) -> list[str]:
    """The names of a final answer, in order, without repeats.

    A JSON list of strings (optionally in a fenced block) is read as such; anything else is one name per
    non-empty line, with a leading ``-``/``*`` bullet removed. Surrounding whitespace is ignored. Only the
    first :data:`~hopgym.model_text.MAX_PARSED_CHARS` characters are read.
    """
    body = parsed_text(text).strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    names: list[str] | None = None
    if body.startswith("["):
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):  # not JSON; an integer past the digit limit; deep nesting
            parsed = None
        if isinstance(parsed, list) and all(isinstance(item, str) for item in parsed):
            names = [item.strip() for item in parsed]
    if names is None:
        names = [_BULLET.sub("", line).strip() for line in body.split("\n")]
    return list(dict.fromkeys(name for name in names if name))


@dataclass(frozen=True)
class AnswerScore:
    """How a named answer set compares with the gold entity set."""

    correct: bool
    precision: float
    recall: float
    f1: float
    hits_at_1: float
    predicted: tuple[str, ...]
    """The names the answer gave, parsed, in order."""


def score_answer(
    text: str | None,
    gold: Sequence[str],
    label: Callable[[str], str],
    resolve: Callable[[str], str] | None = None,
) -> AnswerScore:
    """Score the final answer ``text`` against gold entity ids; ``label`` maps an id to its name.

    ``resolve`` turns each answered item into a name first, e.g. an entity id the tools returned
    (``/m/0dr_4``) into that entity's name, so answering with ids counts as well.
    """
    items = parse_answer_names(text)
    predicted = list(dict.fromkeys(resolve(item) for item in items)) if resolve else items
    gold_names = {label(entity) for entity in gold}
    given = set(predicted)
    right = given & gold_names
    precision = len(right) / len(given) if given else 0.0
    recall = sum(label(entity) in given for entity in gold) / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return AnswerScore(
        correct=bool(gold) and given == gold_names,
        precision=precision,
        recall=recall,
        f1=f1,
        hits_at_1=float(bool(predicted) and predicted[0] in gold_names),
        predicted=tuple(predicted),
    )
