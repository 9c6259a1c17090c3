"""Instantiating FOL patterns on a KG by subgraph matching from a random root (KG2Tool, Section 4.2).

The root is the query's answer: a uniformly chosen entity. The pattern tree is walked top-down (pre-order):
each projection picks one of its target's incoming relations uniformly (inverse edges included, so
``P_r^-1`` appears too), then one of that relation's sources uniformly, and grounds its argument at that
source; intersection and union arguments are grounded at the same target. Negated branches are grounded in
post-order: after the positive arguments of their intersection are grounded and evaluated, the negated
branch is grounded at another member of that set, and kept only if it spares the target. So the complement
removes something and never empties the answer set.

BetaE's quality rules are then checked on the whole query: non-empty answers, at most ``max_answers``; the
arguments of each intersection and union differ; each negation removes at least one final answer; a chain
never walks straight back along the relation it came by (r then r^-1); no query repeats in a batch.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from hopgym.errors import ConfigError, DataError
from hopgym.tasks.fol.queries import FolTree, evaluate_ids, pattern_template
from hopgym.tasks.kg.graph import KnowledgeGraph

DEFAULT_MAX_ANSWERS = 100
ATTEMPTS_PER_SAMPLE = 1000
NEGATION_TRIES = 5

RelationKey = tuple[int, bool]  # (relation id, inverse)


@dataclass(frozen=True)
class FolSample:
    """One instantiated query: its pattern, FOL tree (KG strings) and sorted answer set."""

    pattern: str
    fol: FolTree
    answers: tuple[str, ...]


def sample_queries(
    kg: KnowledgeGraph,
    pattern: str,
    n: int,
    seed: int,
    *,
    max_answers: int = DEFAULT_MAX_ANSWERS,
    max_attempts: int | None = None,
    partial: bool = False,
) -> list[FolSample]:
    """``n`` distinct instances of ``pattern`` passing the quality rules; the same seed gives the same list.

    Each pattern draws from its own random stream (seeded by seed and pattern name), so sampling one
    pattern does not depend on which others are sampled. Raises DataError when ``max_attempts`` (default
    1000 per sample) run out first, e.g. for a pattern the KG is too small to instantiate n times; with
    ``partial``, returns the instances found by then instead (a split drawing further than it needs).
    """
    template = pattern_template(pattern)
    if n < 0 or max_answers < 1:
        raise ConfigError(f"need n >= 0 and max_answers >= 1, got n={n}, max_answers={max_answers}")
    grounder = _Grounder(kg, random.Random(f"{seed}:{pattern}"))
    roots = kg.live_entity_ids()
    if not roots:
        raise DataError("cannot sample FOL queries from an empty KG")
    budget = max_attempts if max_attempts is not None else ATTEMPTS_PER_SAMPLE * max(n, 1)
    samples: list[FolSample] = []
    seen: set[str] = set()
    attempts = 0
    while len(samples) < n:
        if attempts >= budget:
            if partial:
                return samples
            raise DataError(
                f"pattern {pattern}: found {len(samples)} of {n} valid instances in {budget} attempts; "
                "the KG may be too small for this pattern (raise max_attempts or lower n)"
            )
        attempts += 1
        root = roots[grounder.rng.randrange(len(roots))]
        tree = grounder.ground(template, root, None)
        if tree is None:
            continue
        answers = evaluate_ids(tree, kg)
        key = json.dumps(tree, sort_keys=True)
        if not (0 < len(answers) <= max_answers) or key in seen:
            continue
        if not (_branches_differ(tree) and _negations_effective(tree, kg, answers)):
            continue
        seen.add(key)
        samples.append(FolSample(pattern, tree, tuple(sorted(kg.entity_name(a) for a in answers))))
    return samples


class _Grounder:
    """Assigns KG relations and entities to a template, top-down from a target entity."""

    def __init__(self, kg: KnowledgeGraph, rng: random.Random) -> None:
        self.kg = kg
        self.rng = rng

    def ground(self, node: FolTree, target: int, came_by: RelationKey | None) -> FolTree | None:
        """The node instantiated so that ``target`` is in its answer set, or None when that fails."""
        op = node["op"]
        if op == "e":
            return {"op": "e", "entity": self.kg.entity_name(target)}
        if op == "p":
            return self._ground_projection(node, target, came_by)
        if op == "u":
            args = [self.ground(arg, target, None) for arg in node["args"]]
            return None if None in args else {"op": "u", "args": args}
        return self._ground_intersection(node, target)

    def _ground_projection(self, node: FolTree, target: int, came_by: RelationKey | None) -> FolTree | None:
        backwards = None if came_by is None else (came_by[0], not came_by[1])
        keys = [key for key in self._incoming(target) if key[0] != backwards]
        if not keys:
            return None
        (relation, inverse), sources = keys[self.rng.randrange(len(keys))]
        source = sources[self.rng.randrange(len(sources))]
        arg = self.ground(node["arg"], source, (relation, inverse))
        if arg is None:
            return None
        grounded: FolTree = {"op": "p", "relation": self.kg.relation_name(relation), "arg": arg}
        if inverse:
            grounded["inverse"] = True
        return grounded

    def _incoming(self, target: int) -> list[tuple[RelationKey, list[int]]]:
        """Edges into ``target``: (r, fwd) from h of (h, r, target), (r, inv) from t of (target, r, t)."""
        heads = self.kg.neighbours(target, inverse=True)
        tails = self.kg.neighbours(target, inverse=False)
        return [((r, False), hs) for r, hs in heads.items()] + [((r, True), ts) for r, ts in tails.items()]

    def _ground_intersection(self, node: FolTree, target: int) -> FolTree | None:
        args: list[FolTree | None] = [
            None if arg["op"] == "n" else self.ground(arg, target, None) for arg in node["args"]
        ]
        positives = [arg for arg, spec in zip(args, node["args"], strict=True) if spec["op"] != "n"]
        grounded = [arg for arg in positives if arg is not None]
        if len(grounded) < len(positives):
            return None
        negated = [k for k, spec in enumerate(node["args"]) if spec["op"] == "n"]
        if negated:
            members = set.intersection(*(evaluate_ids(arg, self.kg) for arg in grounded))
            others = sorted(members - {target})
            for k in negated:
                args[k] = self._ground_negation(node["args"][k]["arg"], target, others)
                if args[k] is None:
                    return None
        return {"op": "i", "args": args}

    def _ground_negation(self, inner: FolTree, target: int, others: list[int]) -> FolTree | None:
        """A complement grounded at another member of the positive set that leaves ``target`` in place."""
        for _ in range(NEGATION_TRIES if others else 0):
            grounded = self.ground(inner, others[self.rng.randrange(len(others))], None)
            if grounded is not None and target not in evaluate_ids(grounded, self.kg):
                return {"op": "n", "arg": grounded}
        return None


def _branches_differ(tree: FolTree) -> bool:
    """No intersection or union has two identical arguments (anywhere in the tree)."""
    if tree["op"] == "e":
        return True
    if tree["op"] in ("p", "n"):
        return _branches_differ(tree["arg"])
    keys = [json.dumps(arg, sort_keys=True) for arg in tree["args"]]
    return len(set(keys)) == len(keys) and all(_branches_differ(arg) for arg in tree["args"])


def _negations_effective(tree: FolTree, kg: KnowledgeGraph, answers: set[int]) -> bool:
    """Dropping any one complement from the query adds at least one answer."""
    return all(len(evaluate_ids(variant, kg)) > len(answers) for variant in _without_each_negation(tree))


def _without_each_negation(tree: FolTree) -> list[FolTree]:
    """Copies of the tree, each with one complement argument removed from its intersection."""
    op = tree["op"]
    if op == "e":
        return []
    if op == "p":
        return [{**tree, "arg": variant} for variant in _without_each_negation(tree["arg"])]
    variants = []
    for k, arg in enumerate(tree["args"]):
        rest = tree["args"][:k] + tree["args"][k + 1 :]
        if arg["op"] == "n":
            variants.append(rest[0] if len(rest) == 1 else {**tree, "args": rest})
        else:
            variants += [
                {**tree, "args": [*rest[:k], variant, *rest[k:]]} for variant in _without_each_negation(arg)
            ]
    return variants
