"""The FOL executor on a hand-made film graph: every pattern's answer worked out by hand."""

from __future__ import annotations

import pytest

from hopgym.errors import ConfigError, DataError, KGError
from hopgym.tasks.fol.queries import PATTERN_NAMES, execute, pattern_of, pattern_template, shape, trace
from hopgym.tasks.fol.text import query_text
from hopgym.tasks.kg.graph import KnowledgeGraph

FILMS = [
    ("Nolan", "directed", "Inception"),
    ("Nolan", "directed", "Interstellar"),
    ("Villeneuve", "directed", "Dune"),
    ("Villeneuve", "directed", "Arrival"),
    ("Inception", "genre", "SciFi"),
    ("Inception", "genre", "Thriller"),
    ("Interstellar", "genre", "SciFi"),
    ("Dune", "genre", "SciFi"),
    ("Arrival", "genre", "Drama"),
    ("Inception", "language", "English"),
    ("Interstellar", "language", "English"),
    ("Dune", "language", "English"),
    ("Arrival", "language", "English"),
    ("Arrival", "language", "French"),
    ("Nolan", "born_in", "London"),
    ("Villeneuve", "born_in", "Quebec"),
    ("London", "country", "UK"),
    ("Quebec", "country", "Canada"),
]


def e(entity):
    return {"op": "e", "entity": entity}


def p(relation, arg, inverse=False):
    node = {"op": "p", "relation": relation, "arg": arg}
    if inverse:
        node["inverse"] = True
    return node


def i(*args):
    return {"op": "i", "args": list(args)}


def u(*args):
    return {"op": "u", "args": list(args)}


def n(arg):
    return {"op": "n", "arg": arg}


def films_of(genre):
    return p("genre", e(genre), inverse=True)


def in_language(language):
    return p("language", e(language), inverse=True)


HAND_CHECKED = {
    "1p": (p("directed", e("Nolan")), ["Inception", "Interstellar"]),
    "2p": (p("genre", p("directed", e("Nolan"))), ["SciFi", "Thriller"]),
    "3p": (p("country", p("born_in", p("directed", e("Dune"), inverse=True))), ["Canada"]),
    "2i": (i(p("directed", e("Villeneuve")), films_of("SciFi")), ["Dune"]),
    "3i": (
        i(films_of("SciFi"), in_language("English"), p("directed", e("Nolan"))),
        ["Inception", "Interstellar"],
    ),
    "pi": (i(p("directed", p("born_in", e("London"), inverse=True)), films_of("Thriller")), ["Inception"]),
    "ip": (p("genre", i(p("directed", e("Villeneuve")), in_language("French"))), ["Drama"]),
    "2u": (u(p("directed", e("Nolan")), films_of("Drama")), ["Arrival", "Inception", "Interstellar"]),
    "up": (p("language", u(p("directed", e("Nolan")), films_of("Drama"))), ["English", "French"]),
    "2in": (i(films_of("SciFi"), n(p("directed", e("Nolan")))), ["Dune"]),
    "3in": (
        i(films_of("SciFi"), in_language("English"), n(p("directed", e("Villeneuve")))),
        ["Inception", "Interstellar"],
    ),
    "inp": (p("genre", i(in_language("English"), n(p("directed", e("Nolan"))))), ["Drama", "SciFi"]),
    "pin": (i(p("directed", p("born_in", e("Quebec"), inverse=True)), n(in_language("French"))), ["Dune"]),
    "pni": (
        i(in_language("English"), n(p("directed", p("born_in", e("London"), inverse=True)))),
        ["Arrival", "Dune"],
    ),
}


@pytest.fixture(scope="module")
def kg():
    return KnowledgeGraph(FILMS)


def test_the_fourteen_patterns_are_covered():
    assert list(HAND_CHECKED) == list(PATTERN_NAMES)
    assert len(PATTERN_NAMES) == 14


@pytest.mark.parametrize("pattern", PATTERN_NAMES)
def test_execute_matches_the_hand_computed_answer(kg, pattern):
    tree, answers = HAND_CHECKED[pattern]
    assert pattern_of(tree) == pattern
    assert shape(tree) == shape(pattern_template(pattern))
    assert execute(tree, kg) == answers


def test_pni_means_betae_pni():
    assert shape(pattern_template("pni")) == "i(p(e),n(p(p(e))))"
    assert shape(pattern_template("pin")) == "i(p(p(e)),n(p(e)))"
    assert shape(pattern_template("inp")) == "p(i(p(e),n(p(e))))"


def test_trace_lists_operations_in_post_order(kg):
    steps = trace(HAND_CHECKED["ip"][0], kg)
    assert [(s.op, s.relation, s.inverse) for s in steps] == [
        ("p", "directed", False),
        ("p", "language", True),
        ("i", None, False),
        ("p", "genre", False),
    ]
    assert steps[0].inputs == (("Villeneuve",),) and steps[0].result == ("Arrival", "Dune")
    assert steps[2].inputs == (("Arrival", "Dune"), ("Arrival",)) and steps[2].result == ("Arrival",)
    assert steps[-1].result == ("Drama",)
    negation = trace(HAND_CHECKED["2in"][0], kg)[-1]
    assert negation.negated == (False, True)
    assert negation.inputs == (("Dune", "Inception", "Interstellar"), ("Inception", "Interstellar"))
    assert negation.result == ("Dune",)


def test_execute_sees_kg_mutations(kg):
    tree = p("directed", e("Nolan"))
    mutable = KnowledgeGraph(FILMS)
    mutable.add("Nolan", "directed", "Tenet")
    assert execute(tree, mutable) == ["Inception", "Interstellar", "Tenet"]
    assert execute(tree, kg) == ["Inception", "Interstellar"]


def test_malformed_trees_are_rejected(kg):
    with pytest.raises(DataError, match="only allowed as an argument of an intersection"):
        execute(n(p("directed", e("Nolan"))), kg)
    with pytest.raises(DataError, match="not a union"):
        execute(u(p("directed", e("Nolan")), n(films_of("SciFi"))), kg)
    with pytest.raises(DataError, match="at least one argument that is not a complement"):
        execute(i(n(films_of("SciFi")), n(films_of("Drama"))), kg)
    with pytest.raises(DataError, match="at least two 'args'"):
        execute(i(films_of("SciFi")), kg)
    with pytest.raises(DataError, match="op e, p, i, u or n"):
        execute({"op": "x"}, kg)
    with pytest.raises(DataError, match="string 'relation'"):
        execute({"op": "p", "arg": e("Nolan")}, kg)
    with pytest.raises(KGError, match="unknown entity 'Kubrick'"):
        execute(p("directed", e("Kubrick")), kg)
    with pytest.raises(KGError, match="unknown relation 'wrote'"):
        execute(p("wrote", e("Nolan")), kg)
    with pytest.raises(ConfigError, match="unknown FOL pattern '4p'"):
        pattern_template("4p")
    with pytest.raises(DataError, match="matches none of the patterns"):
        pattern_of(p("a", p("b", p("c", p("d", e("x"))))))


def test_query_text_is_deterministic_english():
    assert query_text(HAND_CHECKED["2p"][0]) == "Find the genre of the directed of Nolan."
    assert (
        query_text(HAND_CHECKED["2in"][0])
        == "Find those whose genre is SciFi, but not the directed of Nolan."
    )
    assert query_text(HAND_CHECKED["ip"][0]) == (
        "Find the genre of (the entities that are both the directed of Villeneuve "
        "and those whose language is French)."
    )
    assert query_text(HAND_CHECKED["2u"][0], entity_label=str.upper) == (
        "Find the entities that are either the directed of NOLAN or those whose genre is DRAMA."
    )
    assert query_text(HAND_CHECKED["3i"][0]).startswith(
        "Find the entities that are those whose genre is SciFi, "
    )
