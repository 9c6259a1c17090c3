"""Deterministic natural-language renderings of FOL trees (no LLM in the loop).

A query reads "Find <set>." where each set is phrased recursively: anchors by their label, projections by a
relation wording, intersections as "the entities that are both A and B" (", but not C" for a complement) and
unions as "the entities that are either A or B". The wording of a relation is pluggable: the generic one
uses the relation string itself; FB15k-237 has one built from Freebase paths; a caller with tool
descriptions can pass its own.
"""

from __future__ import annotations

from collections.abc import Callable

from hopgym.tasks.fol.queries import FolTree

# (relation, inverse, subject phrase) -> phrase for the set reached from the subject along the relation.
RelationWording = Callable[[str, bool, str], str]


def generic_wording(relation: str, inverse: bool, subject: str) -> str:
    """'the mother of Bob'; inverse: 'those whose mother is Bob'."""
    words = " ".join(relation.replace("_", " ").replace("/", " ").split())
    return f"those whose {words} is {subject}" if inverse else f"the {words} of {subject}"


def query_text(
    tree: FolTree,
    *,
    entity_label: Callable[[str], str] = str,
    wording: RelationWording = generic_wording,
) -> str:
    """The query as one English instruction, e.g. "Find the genre of Titanic."."""
    return f"Find {_phrase(tree, entity_label, wording, nested=False)}."


def _phrase(tree: FolTree, label: Callable[[str], str], wording: RelationWording, *, nested: bool) -> str:
    op = tree["op"]
    if op == "e":
        return label(tree["entity"])
    if op == "p":
        subject = _phrase(tree["arg"], label, wording, nested=True)
        return wording(tree["relation"], bool(tree.get("inverse", False)), subject)
    parts = [_phrase(arg, label, wording, nested=True) for arg in tree["args"] if arg["op"] != "n"]
    excluded = [_phrase(arg["arg"], label, wording, nested=True) for arg in tree["args"] if arg["op"] == "n"]
    if op == "u":
        text = f"the entities that are either {_enumerate(parts, 'or')}"
    elif len(parts) == 1:
        text = parts[0]
    else:
        both = "both " if len(parts) == 2 else ""
        text = f"the entities that are {both}{_enumerate(parts, 'and')}"
    if excluded:
        text += f", but not {_enumerate(excluded, 'or')}"
    return f"({text})" if nested else text


def _enumerate(items: list[str], conjunction: str) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {conjunction} {items[-1]}"
