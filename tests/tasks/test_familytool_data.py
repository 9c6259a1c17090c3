"""FamilyTool loaders on the real data ($HOPGYM_DATA/familytool): counts and noise from SOURCE.md."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

from hopgym.errors import ConfigError, DataError
from hopgym.tasks.familytool.dataset import load_family_kg, load_familytool, normalize_tool_doc

ROWS = {"b": 483, "e": 455}
KG_TRIPLES = {"b": 154, "e": 491}
KG_RELATIONS = {"b": 65, "e": 66}  # the paper's Table 1 "Edge Types"
HOPS = {"b": {1: 106, 2: 361, 3: 13, 4: 3}, "e": {2: 36, 3: 387, 4: 22, 5: 7, 6: 3}}
PERSON_TAGS = {"b": 8, "e": 7}
UNTAGGED = {"b": 5, "e": 2}
PYTHON_QUOTED = {"b": 63, "e": 0}


@pytest.fixture(scope="module", params=["b", "e"])
def variant(request):
    return request.param


@pytest.fixture(scope="module")
def tasks(variant):
    return load_familytool(variant)


@pytest.fixture(scope="module")
def kg(variant):
    return load_family_kg(variant)


def test_row_and_kg_counts(variant, tasks, kg):
    assert len(tasks) == ROWS[variant]
    assert len({t.id for t in tasks}) == ROWS[variant]
    assert len(kg) == KG_TRIPLES[variant]
    assert len(kg.relations()) == KG_RELATIONS[variant]
    assert Counter(t.hops for t in tasks) == HOPS[variant]


def test_triple_quoting_variants(variant, tasks):
    quoting = Counter(t.subkg_quoting for t in tasks)
    assert quoting["python"] == PYTHON_QUOTED[variant]
    assert quoting["bare"] == ROWS[variant] - PYTHON_QUOTED[variant]


def test_every_golden_triple_is_in_its_kg(tasks, kg):
    missing = [(t.id, triple) for t in tasks for triple in t.gold_subkg if triple not in kg]
    assert missing == []


def test_speaker_tags_are_tolerated_and_names_cleaned(variant, tasks, kg):
    labels = Counter(t.speaker_label for t in tasks)
    assert labels["Person"] == PERSON_TAGS[variant]
    assert labels[None] == UNTAGGED[variant]
    assert all((t.speaker is None) == (t.speaker_label is None) for t in tasks)
    # "Jack." and "Bob " in the raw tags come out as plain names that the KG knows.
    assert {t.speaker for t in tasks if t.speaker} == {"Alice", "Bob", "Jack"}
    assert all(kg.has_entity(t.speaker) for t in tasks if t.speaker)
    raw_noisy = [t for t in tasks if "Jack.</speak>" in t.user_text or "Bob </speak>" in t.user_text]
    assert raw_noisy and all(t.speaker in ("Jack", "Bob") for t in raw_noisy)


def test_query_is_the_bare_user_words(tasks):
    for task in tasks:
        assert task.query and task.query in task.user_text
        assert "<speak>" not in task.query
        assert "The extra information" not in task.query


def test_gold_call_and_coverage_inputs(tasks):
    for task in tasks:
        assert task.gold_call.name in {tool.name for tool in task.candidate_tools}
        assert json.loads(task.gold_call_text)[0]["parameters"] == task.gold_call.arguments
        assert set(task.used_gold_entities) <= set(task.gold_entities)
    # The final entity of a sub-KG is normally what the call uses.
    assert sum(bool(t.used_gold_entities) for t in tasks) >= len(tasks) - 1


def test_tool_docs_become_valid_json_schema():
    raw_docs = {}
    for variant in ("b", "e"):
        path = Path(os.environ["HOPGYM_DATA"]) / "familytool" / f"familytool-{variant}.jsonl"
        for line in path.read_text(encoding="utf-8").splitlines():
            for doc in json.loads(line)[1]["content"]:
                raw_docs[json.dumps(doc, sort_keys=True)] = doc
    assert len(raw_docs) == 116
    list_form = [doc for doc in raw_docs.values() if isinstance(doc["parameters"]["properties"], list)]
    assert len(list_form) == 10
    for doc in raw_docs.values():
        tool = normalize_tool_doc(doc)
        jsonschema.Draft7Validator.check_schema(tool.parameters)
        assert tool.parameters["type"] == "object"
        assert isinstance(tool.parameters["properties"], dict)
        assert tool.openai_schema()["function"]["name"] == doc["name"]
    python_typed = [
        (doc, name)
        for doc in raw_docs.values()
        if isinstance(doc["parameters"]["properties"], dict)
        for name, schema in doc["parameters"]["properties"].items()
        if schema.get("type") in ("int", "float", "Dict")
    ]
    assert len(python_typed) == 9
    for doc, name in python_typed:
        kind = normalize_tool_doc(doc).parameters["properties"][name]["type"]
        assert (
            kind
            == {"int": "integer", "float": "number", "Dict": "object"}[
                doc["parameters"]["properties"][name]["type"]
            ]
        )
    converted = normalize_tool_doc(list_form[0])
    assert list(converted.parameters["properties"]) == [
        p["name"] for p in list_form[0]["parameters"]["properties"]
    ]
    first = list_form[0]["parameters"]["properties"][0]
    assert converted.parameters["properties"][first["name"]] == {"description": first["description"]}


def test_bad_inputs_name_what_is_wrong(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="unknown FamilyTool variant"):
        load_familytool("x")
    bad = tmp_path / "rows.jsonl"
    bad.write_text('[{"role": "id", "content": "r1"}]\n')
    with pytest.raises(DataError, match=r"rows.jsonl:1: a row must hold the messages"):
        load_familytool("b", bad)
    with pytest.raises(DataError, match="does not exist"):
        load_familytool("b", tmp_path / "missing.jsonl")
    monkeypatch.delenv("HOPGYM_DATA")
    with pytest.raises(DataError, match="HOPGYM_DATA is not set"):
        load_family_kg("e")
