"""The KG store on a small hand-made family graph: indexes, listings, mutation, path search, file loading."""

from __future__ import annotations

import pytest

from hopgym.errors import DataError, KGError
from hopgym.tasks.kg.graph import KnowledgeGraph
from hopgym.tasks.kg.triples import parse_triples, quotes_triples

FAMILY = [
    ("Bob", "mother", "Alice"),
    ("Bob", "father", "Jack"),
    ("Alice", "husband", "Jack"),
    ("Alice", "son", "Bob"),
    ("Alice", "friend", "Carol"),
    ("Alice", "friend", "Dave"),
    ("Carol", "likes", "Pizza"),
    ("Jack", "likes", "Pizza"),
    ("Jack", "likes", "Sushi"),
]


@pytest.fixture
def kg() -> KnowledgeGraph:
    return KnowledgeGraph(FAMILY)


def test_indexes_answer_both_directions_in_insertion_order(kg):
    assert kg.tails("Alice", "friend") == ["Carol", "Dave"]
    assert kg.heads("Pizza", "likes") == ["Carol", "Jack"]
    assert kg.tails("Jack", "likes") == ["Pizza", "Sushi"]
    assert kg.tails("Pizza", "likes") == []  # a leaf has no outgoing edge of that relation
    assert kg.out_relations("Alice") == ["husband", "son", "friend"]
    assert kg.in_relations("Jack") == ["father", "husband"]
    assert kg.out_edges("Jack") == [("Jack", "likes", "Pizza"), ("Jack", "likes", "Sushi")]
    assert kg.in_edges("Bob") == [("Alice", "son", "Bob")]


def test_listings_and_membership(kg):
    assert len(kg) == len(FAMILY)
    assert list(kg) == FAMILY
    assert kg.relations() == ["father", "friend", "husband", "likes", "mother", "son"]
    assert kg.entities() == ["Alice", "Bob", "Carol", "Dave", "Jack", "Pizza", "Sushi"]
    assert ("Bob", "mother", "Alice") in kg
    assert ("Alice", "mother", "Bob") not in kg


def test_unknown_names_raise_with_close_matches(kg):
    with pytest.raises(KGError, match=r"unknown relation 'likess'.*'likes'"):
        kg.tails("Jack", "likess")
    with pytest.raises(KGError, match=r"unknown entity 'Alise'.*'Alice'"):
        kg.out_edges("Alise")


def test_add_creates_entities_and_relations_and_ignores_duplicates(kg):
    assert kg.add("Bob", "teacher", "Mr. Smith") is True
    assert kg.add("Bob", "teacher", "Mr. Smith") is False
    assert len(kg) == len(FAMILY) + 1
    assert "teacher" in kg.relations()
    assert kg.has_entity("Mr. Smith")
    assert kg.tails("Bob", "teacher") == ["Mr. Smith"]
    assert kg.heads("Mr. Smith", "teacher") == ["Bob"]
    with pytest.raises(KGError, match="non-empty"):
        kg.add("Bob", "", "X")


def test_remove_updates_indexes_and_listings(kg):
    kg.remove("Jack", "likes", "Sushi")
    assert ("Jack", "likes", "Sushi") not in kg
    assert kg.tails("Jack", "likes") == ["Pizza"]
    assert "Sushi" not in kg.entities()
    assert not kg.has_entity("Sushi")
    kg.remove("Carol", "likes", "Pizza")
    kg.remove("Jack", "likes", "Pizza")
    assert "likes" not in kg.relations()
    assert not kg.has_relation("likes")
    with pytest.raises(KGError, match="does not hold"):
        kg.remove("Jack", "likes", "Pizza")
    kg.add("Jack", "likes", "Pizza")  # re-adding after removal works
    assert kg.heads("Pizza", "likes") == ["Jack"]


def test_search_follows_every_tail_and_keeps_only_complete_walks(kg):
    result = kg.search("Bob", ["mother", "friend", "likes"])
    assert result.complete
    # Dave has no "likes": his branch is dropped, Carol's is kept.
    assert result.triples == (
        ("Bob", "mother", "Alice"),
        ("Alice", "friend", "Carol"),
        ("Carol", "likes", "Pizza"),
    )
    assert result.ends == ("Pizza",)


def test_search_first_tail_only_is_the_official_walk(kg):
    every = kg.search("Bob", ["father", "likes"])
    first = kg.search("Bob", ["father", "likes"], first_tail_only=True)
    assert every.ends == ("Pizza", "Sushi")
    assert first.ends == ("Pizza",)
    assert first.triples == (("Bob", "father", "Jack"), ("Jack", "likes", "Pizza"))


def test_search_reports_the_first_failing_hop(kg):
    made_up = kg.search("Bob", ["mother", "cousin"])
    assert made_up.failed_hop == 1 and not made_up.complete
    assert made_up.triples == (("Bob", "mother", "Alice"),)
    assert made_up.ends == ("Alice",)
    from_leaf = kg.search("Bob", ["father", "likes", "likes"])
    assert from_leaf.failed_hop == 2
    assert from_leaf.ends == ("Pizza", "Sushi")
    assert kg.search("Bob", []).ends == ("Bob",)
    with pytest.raises(KGError, match="unknown entity 'Bobby'"):
        kg.search("Bobby", ["mother"])


def test_search_sees_mutations_at_once(kg):
    assert kg.search("Bob", ["teacher"]).failed_hop == 0
    kg.add("Bob", "teacher", "Mr. Smith")
    kg.add("Mr. Smith", "prefer_food", "food_0001")
    assert kg.search("Bob", ["teacher", "prefer_food"]).ends == ("food_0001",)


def test_load_file_merges_both_quotings(kg, tmp_path):
    path = tmp_path / "extra.txt"
    path.write_text(
        "['Bob', 'teacher', 'Mr. Smith']\n\n[Mr. Smith, prefer_food, food_0001]\n['Bob', 'mother', 'Alice']\n"
    )
    assert kg.load_file(path) == 2
    assert kg.tails("Mr. Smith", "prefer_food") == ["food_0001"]
    assert KnowledgeGraph.from_file(path).relations() == ["mother", "prefer_food", "teacher"]


def test_load_file_rejects_malformed_lines_with_their_number(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("['Bob', 'mother', 'Alice']\n['Bob', 'mother']\n")
    with pytest.raises(DataError, match=r"bad.txt:2: .*three"):
        KnowledgeGraph.from_file(path)
    path.write_text("Bob mother Alice\n")
    with pytest.raises(DataError, match=r"bad.txt:1: expected one triple"):
        KnowledgeGraph.from_file(path)
    with pytest.raises(DataError, match="cannot read"):
        KnowledgeGraph.from_file(tmp_path / "missing.txt")


def test_triple_text_parsing_handles_both_quotings():
    quoted = "(['Bob', 'mother', 'Alice'], ['Alice', 'prefer_food', 'food, spicy'])."
    bare = "([Jack, wife, Alice], [Bob, teacher, Mr. Smith])."
    assert parse_triples(quoted) == [("Bob", "mother", "Alice"), ("Alice", "prefer_food", "food, spicy")]
    assert parse_triples(bare) == [("Jack", "wife", "Alice"), ("Bob", "teacher", "Mr. Smith")]
    assert quotes_triples(quoted) and not quotes_triples(bare)


def test_integer_id_access_projects_sets(kg):
    alice, bob = kg.entity_id("Alice"), kg.entity_id("Bob")
    friend, likes = kg.relation_id("friend"), kg.relation_id("likes")
    friends = kg.project_ids({alice, bob}, friend, inverse=False)
    assert {kg.entity_name(e) for e in friends} == {"Carol", "Dave"}
    likers = kg.project_ids({kg.entity_id("Pizza")}, likes, inverse=True)
    assert {kg.entity_name(e) for e in likers} == {"Carol", "Jack"}
    assert kg.relation_name(friend) == "friend"
    assert {kg.relation_name(r) for r in kg.neighbours(alice, inverse=False)} == {"husband", "son", "friend"}
    assert [kg.entity_name(e) for e in kg.live_entity_ids()] == [
        "Bob",
        "Alice",
        "Jack",
        "Carol",
        "Dave",
        "Pizza",
        "Sushi",
    ]


def test_bulk_id_load_checks_ranges():
    kg = KnowledgeGraph.from_id_triples(["a", "b"], ["r"], [(0, 0, 1), (0, 0, 1), (1, 0, 0)])
    assert list(kg) == [("a", "r", "b"), ("b", "r", "a")]
    kg.add("a", "s", "c")  # a bulk-loaded graph stays mutable
    assert kg.tails("a", "s") == ["c"]
    with pytest.raises(KGError, match="out of range"):
        KnowledgeGraph.from_id_triples(["a"], ["r"], [(0, 0, 1)])
