"""First-order-logic queries over a KG: the 14 BetaE patterns as JSON trees, and their executor.

A tree node is one of (docs/contracts.md, "KG2Tool tasks"):
``{"op": "e", "entity": ID}`` an anchor; ``{"op": "p", "relation": REL, "arg": T}`` the projection of the
set T along REL (``"inverse": true`` goes tail -> head); ``{"op": "i", "args": [...]}`` intersection;
``{"op": "u", "args": [...]}`` union; ``{"op": "n", "arg": T}`` complement, only as an argument of an
intersection (``i(A, n(B))`` is A minus B, as in BetaE's 2in/3in/inp/pin/pni).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hopgym.errors import ConfigError, DataError
from hopgym.tasks.kg.graph import KnowledgeGraph

FolTree = dict[str, Any]


def _e() -> FolTree:
    return {"op": "e", "entity": None}


def _p(arg: FolTree) -> FolTree:
    return {"op": "p", "relation": None, "arg": arg}


def _i(*args: FolTree) -> FolTree:
    return {"op": "i", "args": list(args)}


def _u(*args: FolTree) -> FolTree:
    return {"op": "u", "args": list(args)}


def _n(arg: FolTree) -> FolTree:
    return {"op": "n", "arg": arg}


# Templates: entities and relations are None until a sampler grounds them.
PATTERNS: Mapping[str, FolTree] = {
    "1p": _p(_e()),
    "2p": _p(_p(_e())),
    "3p": _p(_p(_p(_e()))),
    "2i": _i(_p(_e()), _p(_e())),
    "3i": _i(_p(_e()), _p(_e()), _p(_e())),
    "pi": _i(_p(_p(_e())), _p(_e())),
    "ip": _p(_i(_p(_e()), _p(_e()))),
    "2u": _u(_p(_e()), _p(_e())),
    "up": _p(_u(_p(_e()), _p(_e()))),
    "2in": _i(_p(_e()), _n(_p(_e()))),
    "3in": _i(_p(_e()), _p(_e()), _n(_p(_e()))),
    "inp": _p(_i(_p(_e()), _n(_p(_e())))),
    "pin": _i(_p(_p(_e())), _n(_p(_e()))),
    "pni": _i(_p(_e()), _n(_p(_p(_e())))),
}
PATTERN_NAMES: tuple[str, ...] = tuple(PATTERNS)


def pattern_template(name: str) -> FolTree:
    """A fresh copy of a pattern's template tree."""
    if name not in PATTERNS:
        raise ConfigError(f"unknown FOL pattern {name!r}; valid: {', '.join(PATTERN_NAMES)}")
    return copy.deepcopy(PATTERNS[name])


def shape(tree: FolTree) -> str:
    """The operator structure of a tree, e.g. ``i(p(e),n(p(e)))``: equal for all instances of a pattern."""
    op = _op(tree)
    if op == "e":
        return "e"
    if op in ("p", "n"):
        return f"{op}({shape(tree['arg'])})"
    return f"{op}({','.join(shape(arg) for arg in tree['args'])})"


def pattern_of(tree: FolTree) -> str:
    """The name of the pattern a tree instantiates; DataError when it matches none of the 14."""
    wanted = shape(tree)
    for name, template in PATTERNS.items():
        if shape(template) == wanted:
            return name
    raise DataError(f"FOL tree of shape {wanted} matches none of the patterns {', '.join(PATTERN_NAMES)}")


@dataclass(frozen=True)
class FolStep:
    """One operation of a query's execution, in post-order (the order a solution path calls tools in).

    ``op`` is "p" (``inputs`` holds the one input set), "i" (``negated[k]`` tells which inputs are
    complemented, i.e. subtracted) or "u". Entity sets are sorted strings.
    """

    op: str
    relation: str | None
    inverse: bool
    inputs: tuple[tuple[str, ...], ...]
    negated: tuple[bool, ...]
    result: tuple[str, ...]


def execute(tree: FolTree, kg: KnowledgeGraph) -> list[str]:
    """The answer set of a FOL tree on a KG, as sorted strings."""
    return list(_names(kg, evaluate_ids(tree, kg)))


def trace(tree: FolTree, kg: KnowledgeGraph) -> list[FolStep]:
    """Every operation of the tree with its inputs and result, in post-order; the last one is the answer."""
    steps: list[FolStep] = []
    evaluate_ids(tree, kg, steps)
    return steps


def evaluate_ids(tree: FolTree, kg: KnowledgeGraph, steps: list[FolStep] | None = None) -> set[int]:
    """The answer set as entity ids; appends a FolStep per operation to ``steps`` when given."""
    op = _op(tree)
    if op == "e":
        entity = tree.get("entity")
        if not isinstance(entity, str):
            raise DataError(f"anchor node needs a string 'entity', got {tree!r:.120}")
        return {kg.entity_id(entity)}
    if op == "p":
        relation = tree.get("relation")
        inverse = tree.get("inverse", False)
        if not isinstance(relation, str) or not isinstance(inverse, bool):
            raise DataError(f"projection needs a string 'relation' and a bool 'inverse', got {tree!r:.120}")
        source = evaluate_ids(_child(tree), kg, steps)
        result = kg.project_ids(source, kg.relation_id(relation), inverse=inverse)
        if steps is not None:
            steps.append(FolStep("p", relation, inverse, (_names(kg, source),), (False,), _names(kg, result)))
        return result
    if op == "n":
        raise DataError("a complement ('n') is only allowed as an argument of an intersection ('i')")
    args = _children(tree)
    negated = tuple(_op(arg) == "n" for arg in args)
    sets = [
        evaluate_ids(_child(arg) if neg else arg, kg, steps) for arg, neg in zip(args, negated, strict=True)
    ]
    if op == "u":
        if any(negated):
            raise DataError("a complement ('n') is only allowed inside an intersection, not a union")
        result = set().union(*sets)
    else:
        positives = [s for s, neg in zip(sets, negated, strict=True) if not neg]
        if not positives:
            raise DataError("an intersection needs at least one argument that is not a complement")
        result = set.intersection(*positives).difference(
            *(s for s, neg in zip(sets, negated, strict=True) if neg)
        )
    if steps is not None:
        steps.append(
            FolStep(op, None, False, tuple(_names(kg, s) for s in sets), negated, _names(kg, result))
        )
    return result


def _names(kg: KnowledgeGraph, ids: set[int]) -> tuple[str, ...]:
    return tuple(sorted(kg.entity_name(i) for i in ids))


def _op(tree: Any) -> str:
    if not isinstance(tree, dict) or tree.get("op") not in ("e", "p", "i", "u", "n"):
        raise DataError(f"FOL node must be an object with op e, p, i, u or n, got {tree!r:.120}")
    return tree["op"]


def _child(tree: FolTree) -> FolTree:
    if "arg" not in tree:
        raise DataError(f"'{tree['op']}' node needs an 'arg', got {tree!r:.120}")
    return tree["arg"]


def _children(tree: FolTree) -> list[FolTree]:
    args = tree.get("args")
    if not isinstance(args, list) or len(args) < 2:
        raise DataError(f"'{tree['op']}' node needs a list of at least two 'args', got {tree!r:.120}")
    return args
