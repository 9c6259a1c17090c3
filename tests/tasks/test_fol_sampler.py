"""FOL sampling on the real FB15k-237 and family KGs: quality rules, reproducibility, raw-triple checks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hopgym.errors import DataError
from hopgym.tasks.familytool.dataset import load_family_kg
from hopgym.tasks.fol.queries import PATTERN_NAMES, execute, pattern_template, shape
from hopgym.tasks.fol.sampler import sample_queries
from hopgym.tasks.kg.fb15k237 import load_fb15k237
from hopgym.tasks.kg.graph import KnowledgeGraph

N = 200
CAP = 100


@pytest.fixture(scope="module")
def fb():
    return load_fb15k237()


@pytest.fixture(scope="module")
def samples(fb):
    return {pattern: sample_queries(fb.kg, pattern, N, seed=7) for pattern in PATTERN_NAMES}


def _set_nodes(tree):
    """Every intersection and union node of a tree."""
    if tree["op"] == "e":
        return []
    if tree["op"] in ("p", "n"):
        return _set_nodes(tree["arg"])
    return [tree] + [node for arg in tree["args"] for node in _set_nodes(arg)]


def _chains(tree):
    """(outer, inner) pairs of directly nested projections."""
    if tree["op"] == "e":
        return []
    if tree["op"] in ("p", "n"):
        inner = tree["arg"]
        pair = [(tree, inner)] if tree["op"] == "p" and inner["op"] == "p" else []
        return pair + _chains(inner)
    return [pair for arg in tree["args"] for pair in _chains(arg)]


def _drop_negation(tree):
    """The query with its one complement removed (the sampler's patterns have at most one)."""
    if tree["op"] == "p":
        return {**tree, "arg": _drop_negation(tree["arg"])}
    if tree["op"] == "i" and any(arg["op"] == "n" for arg in tree["args"]):
        kept = [arg for arg in tree["args"] if arg["op"] != "n"]
        return kept[0] if len(kept) == 1 else {**tree, "args": kept}
    if tree["op"] == "i":
        return {**tree, "args": [_drop_negation(arg) for arg in tree["args"]]}
    return tree


@pytest.mark.parametrize("pattern", PATTERN_NAMES)
def test_every_sample_follows_the_quality_rules(fb, samples, pattern):
    batch = samples[pattern]
    assert len(batch) == N
    assert len({json.dumps(s.fol, sort_keys=True) for s in batch}) == N  # no repeats
    for sample in batch:
        assert sample.pattern == pattern
        assert shape(sample.fol) == shape(pattern_template(pattern))
        answers = execute(sample.fol, fb.kg)
        assert list(sample.answers) == answers == sorted(answers)
        assert 1 <= len(answers) <= CAP
        for node in _set_nodes(sample.fol):
            branches = [json.dumps(arg, sort_keys=True) for arg in node["args"]]
            assert len(set(branches)) == len(branches), "branches of an intersection or union must differ"
        for outer, inner in _chains(sample.fol):
            went_back = outer["relation"] == inner["relation"] and outer.get("inverse", False) != inner.get(
                "inverse", False
            )
            assert not went_back, "a chain must not walk straight back along the relation it came by"
        if "n" in pattern:
            assert set(answers) < set(execute(_drop_negation(sample.fol), fb.kg)), (
                "negation must remove answers"
            )


def test_inverse_relations_are_used(samples):
    projections = [
        node
        for batch in samples.values()
        for sample in batch
        for node in [sample.fol, *sample.fol.get("args", [])]
        if node["op"] == "p"
    ]
    assert any(node.get("inverse") for node in projections)
    assert any(not node.get("inverse") for node in projections)


def test_same_seed_same_bytes_other_seed_other_tasks(fb, samples):
    for pattern in ("2p", "pi", "up", "pni"):
        again = sample_queries(fb.kg, pattern, N, seed=7)
        dump = [json.dumps([s.fol, s.answers]) for s in samples[pattern]]
        assert [json.dumps([s.fol, s.answers]) for s in again] == dump
        other = sample_queries(fb.kg, pattern, 20, seed=8)
        assert [json.dumps([s.fol, s.answers]) for s in other] != dump[:20]


def test_answer_cap_is_respected(fb):
    for sample in sample_queries(fb.kg, "2u", 50, seed=1, max_answers=3):
        assert 1 <= len(sample.answers) <= 3


def test_instances_check_out_against_the_raw_triple_files(samples):
    """Recompute a few answers by brute force over the raw id files, independently of the KG store."""
    folder = Path(os.environ["HOPGYM_DATA"]) / "fb15k-237"

    def column(name):
        text = (folder / name).read_text(encoding="utf-8").replace("\r\n", "\n")
        return [line.split("\t")[0] for line in text.split("\n")[1:] if line]

    entities, relations = column("entity2id.txt"), column("relation2id.txt")
    pairs_by_relation = {}
    for split in ("train2id.txt", "valid2id.txt", "test2id.txt"):
        for line in (folder / split).read_text().split("\n")[1:]:
            if line:
                h, t, r = map(int, line.split())
                pairs_by_relation.setdefault(relations[r], set()).add((entities[h], entities[t]))

    def project(sources, relation, inverse):
        if inverse:
            return {h for h, t in pairs_by_relation[relation] if t in sources}
        return {t for h, t in pairs_by_relation[relation] if h in sources}

    def brute(tree):
        if tree["op"] == "e":
            return {tree["entity"]}
        if tree["op"] == "p":
            return project(brute(tree["arg"]), tree["relation"], tree.get("inverse", False))
        keep = [brute(arg) for arg in tree["args"] if arg["op"] != "n"]
        drop = [brute(arg["arg"]) for arg in tree["args"] if arg["op"] == "n"]
        return set.intersection(*keep).difference(*drop) if tree["op"] == "i" else set.union(*keep)

    for pattern in ("1p", "2p", "2in", "pni"):
        for sample in samples[pattern][:2]:
            assert sorted(brute(sample.fol)) == list(sample.answers)


def test_family_kg_anchors_and_answers_are_names():
    kg = load_family_kg("e")
    for pattern in ("1p", "2p", "2i", "ip", "inp"):
        batch = sample_queries(kg, pattern, 10, seed=0)
        for sample in batch:
            assert all(kg.has_entity(answer) for answer in sample.answers)
            assert execute(sample.fol, kg) == list(sample.answers)


def test_impossible_requests_fail_with_a_reason():
    tiny = KnowledgeGraph([("a", "r", "b")])
    with pytest.raises(DataError, match="found 0 of 1 valid instances"):
        sample_queries(tiny, "2i", 1, seed=0, max_attempts=50)
    with pytest.raises(DataError, match="empty KG"):
        sample_queries(KnowledgeGraph(), "1p", 1, seed=0)
