"""KGETool path extraction on the real family KG (familykg-b), against paths computed by hand from its lines.

Facts of familykg-b.txt used below: Bob -mother-> Alice, Bob -father-> Jack (in that order among Bob's
edges), Bob has no "wife"/"husband" edge; Alice -prefer_dinnertime-> dinnertime_0002; Jack
-prefer_dinnertime-> dinnertime_0001, Jack -wife-> Alice; Bob -prefer_dinnertime-> dinnertime_0000;
Bob -prefer_travel_city-> travel_city_0000 and then prefer_travel_city_0000 (two tails).
"""

from __future__ import annotations

import pytest

from hopgym.agents.policies.kgetool.path_prompt import extraction_messages
from hopgym.agents.policies.kgetool.replies import parse_hermes_tool_calls, reply_text
from hopgym.errors import ConfigError
from hopgym.tasks.familytool.dataset import load_family_kg
from hopgym.tasks.familytool.extraction import BAD_EXTRACT, extract, parse_search_calls

MOTHER_DINNER = (("Bob", "mother", "Alice"), ("Alice", "prefer_dinnertime", "dinnertime_0002"))
FATHER_DINNER = (("Bob", "father", "Jack"), ("Jack", "prefer_dinnertime", "dinnertime_0001"))
MOTHER_TEXT = "([['Bob', 'mother', 'Alice'], ['Alice', 'prefer_dinnertime', 'dinnertime_0002']])"
FATHER_TEXT = "([['Bob', 'father', 'Jack'], ['Jack', 'prefer_dinnertime', 'dinnertime_0001']])"
MODES = ("exact", "greedy", "retrieval")
READINGS = ("official", "paper")
TABLE = {"dad": ["father", "mother", "husband"], "mom": ["mother", "wife", "husband"]}


def table_retriever(relation: str, relations: list[str], k: int) -> list[str]:
    """A fixed similarity table (the injected-retriever contract)."""
    return TABLE[relation][:k]


@pytest.fixture
def kg():
    return load_family_kg("b")


def run(text, kg, mode, reading="official"):
    return extract(text, kg, mode, reading=reading, retriever=table_retriever, top_k=3)


@pytest.mark.parametrize("reading", READINGS)
@pytest.mark.parametrize("mode", MODES)
def test_a_valid_path_is_the_same_in_every_mode(kg, mode, reading):
    text = 'KG.search(start="Bob", path=["<relationship>father","<relationship>prefer_dinnertime"])'
    result = run(text, kg, mode, reading)
    assert result.text == FATHER_TEXT
    assert result.triples == FATHER_DINNER


def test_exact_is_strict_a_made_up_relation_yields_nothing(kg):
    result = run('KG.search(start="Bob", path=["dad","prefer_dinnertime"])', kg, "exact")
    assert result.text == BAD_EXTRACT and result.triples == ()


@pytest.mark.parametrize("reading", READINGS)
def test_greedy_expands_a_made_up_first_hop_and_keeps_the_walks_that_finish(kg, reading):
    result = run('KG.search(start="Bob", path=["dad","prefer_dinnertime"])', kg, "greedy", reading)
    # Every out-edge of Bob is tried for "dad"; only Alice and Jack have prefer_dinnertime.
    assert result.text == f"{MOTHER_TEXT}{BAD_EXTRACT}{FATHER_TEXT}{BAD_EXTRACT}"
    assert result.paths == (MOTHER_DINNER, FATHER_DINNER)


def test_greedy_official_appends_every_edge_of_the_node_at_a_failing_later_hop(kg):
    result = run('KG.search(start="Bob", path=["father","favourite_dinner"])', kg, "greedy")
    [path] = result.paths
    assert path[0] == ("Bob", "father", "Jack")
    assert path[1:] == tuple(kg.out_edges("Jack"))  # the whole neighbourhood of Jack, in KG order
    assert ("Jack", "prefer_dinnertime", "dinnertime_0001") in path and ("Jack", "wife", "Alice") in path
    assert result.text.endswith(BAD_EXTRACT) and result.text.count(BAD_EXTRACT) == 1


def test_greedy_paper_makes_a_made_up_later_hop_a_wildcard(kg):
    result = run('KG.search(start="Bob", path=["father","favourite_dinner"])', kg, "greedy", "paper")
    assert len(result.paths) == len(kg.out_edges("Jack"))  # one two-hop walk per edge of Jack
    assert (("Bob", "father", "Jack"), ("Jack", "wife", "Alice")) in result.paths
    assert result.text.count(BAD_EXTRACT) == len(result.paths)


def test_official_walk_follows_only_the_first_tail_paper_follows_all(kg):
    text = 'KG.search(start="Bob", path=["prefer_travel_city"])'
    assert run(text, kg, "exact").triples == (("Bob", "prefer_travel_city", "travel_city_0000"),)
    assert run(text, kg, "exact", "paper").paths == (
        (("Bob", "prefer_travel_city", "travel_city_0000"),),
        (("Bob", "prefer_travel_city", "prefer_travel_city_0000"),),
    )


def test_retrieval_replaces_made_up_relations_by_the_retrievers_candidates(kg):
    # mom -> mother | wife | husband. mother walks Bob->Alice->dinnertime_0002. Officially, Bob has no wife
    # and no husband, so those hops are skipped and the walk takes prefer_dinnertime at Bob (one triple,
    # dinnertime_0000, the same end twice: deduplicated); only the longest paths are kept.
    result = run('KG.search(start="Bob", path=["mom","prefer_dinnertime"])', kg, "retrieval")
    assert result.text == MOTHER_TEXT and BAD_EXTRACT not in result.text
    two = run('KG.search(start="Bob", path=["dad","prefer_dinnertime"])', kg, "retrieval")
    assert two.text == FATHER_TEXT + MOTHER_TEXT


def test_retrieval_official_quirk_checks_hops_at_the_start_entity(kg):
    text = 'KG.search(start="Bob", path=["father","wife"])'
    # Bob has no "wife", so the official walk skips that hop and ends on Jack; the paper's reading walks on.
    assert run(text, kg, "retrieval").paths == ((("Bob", "father", "Jack"),),)
    assert run(text, kg, "retrieval", "paper").paths == (
        (("Bob", "father", "Jack"), ("Jack", "wife", "Alice")),
    )
    assert run(text, kg, "greedy").paths == ((("Bob", "father", "Jack"), ("Jack", "wife", "Alice")),)
    # Nothing walkable: officially nothing at all (a format error if alone), in the paper's reading bad.
    assert run('KG.search(start="Bob", path=["wife"])', kg, "retrieval").text == ""
    assert run('KG.search(start="Bob", path=["wife"])', kg, "retrieval", "paper").text == BAD_EXTRACT


@pytest.mark.parametrize("mode", MODES)
def test_unknown_start_is_a_format_error_and_malformed_calls_are_hallucinations(kg, mode):
    assert run('KG.search(start="Bobby", path=["father"])', kg, mode).text == ""
    assert run("no search call at all", kg, mode).text == ""
    for malformed in (
        'KG.search("Bob", ["father"])',
        'KG.search(Start="Bob", Path=["father"])',
        "KG.search(start=Bob, path=[])",
    ):
        assert run(malformed, kg, mode).text == BAD_EXTRACT, malformed


def test_parsing_follows_the_official_regexes():
    calls = parse_search_calls(
        "KG_search(start = 'Alice', path = [`son`, <relationship>prefer_city])\n"
        "KG.search(start=\u201cJack\u201d\uff0c path=\u3010wife\u3011)\n"
        'KG.search(start="Bob",\npath=["father"])'
    )
    assert [(c.start, c.path) for c in calls] == [("Alice", ("son", "prefer_city")), ("Jack", ("wife",))]


def test_official_parser_glues_all_onto_the_previous_relation(kg):
    def paths(path, reading="official"):
        return [c.path for c in parse_search_calls(f"KG.search(start=Bob, path=[{path}])", reading)]

    assert paths("mother, 全部, prefer_dinnertime") == [("mother全部", "prefer_dinnertime")]
    assert paths("mother, 全部, 全部") == [("mother全部全部",)]
    assert paths("全部, mother") == [("全部", "mother")]  # nothing before it to glue onto
    assert paths("全部") == [("全部",)]
    assert paths("mother, 全部", "paper") == [("mother", "全部")]
    # "mother全部" is made up: greedy expands every edge of Bob, as for any made-up first hop.
    glued = run("KG.search(start=Bob, path=[mother, 全部])", kg, "greedy")
    assert glued.text == run("KG.search(start=Bob, path=[mum])", kg, "greedy").text
    assert glued.triples == tuple(triple for triple in kg if triple[0] == "Bob")  # in KG order
    assert run("KG.search(start=Bob, path=[mother, 全部])", kg, "exact", "paper").text == BAD_EXTRACT


def test_retrieval_official_lookup_table_carries_over_to_later_calls_of_the_same_output(kg):
    # familykg-b: Jack and Bob have prefer_departure, Alice has none. Officially the first call looks up
    # (Alice, prefer_departure) after wife, which leaves an empty entry that lets the second call's
    # hop check at its start Alice pass, so the second call walks on from Bob.
    first = "KG.search(start=Jack, path=[wife, prefer_departure])"
    second = "KG.search(start=Alice, path=[son, prefer_departure])"
    walked = (("Alice", "son", "Bob"), ("Bob", "prefer_departure", "departure_0000"))
    assert run(f"{first}\n{second}", kg, "retrieval").paths == ((("Jack", "wife", "Alice"),), walked)
    assert run(f"{second}\n{first}", kg, "retrieval").paths == (walked[:1], (("Jack", "wife", "Alice"),))
    assert run(second, kg, "retrieval").paths == (walked[:1],)  # the table lives for one output only
    assert run(second, kg, "retrieval", "paper").paths == (walked,)


def test_several_calls_concatenate_in_order(kg):
    text = (
        'KG.search(start="Bob", path=["father","prefer_dinnertime"])\n'
        'KG.search(start="Bob", path=["mother","prefer_dinnertime"])'
    )
    assert run(text, kg, "greedy").text == FATHER_TEXT + MOTHER_TEXT


def test_inductive_a_new_person_and_relation_are_used_without_restart(kg):
    messages = extraction_messages("<speak>Speaker: Bob</speak> Order my sister's tea.", kg.relations())
    assert "<relationship>sister" not in messages[0]["content"]
    kg.add("Bob", "sister", "Carol")
    kg.add("Carol", "prefer_tea", "tea_0001")
    messages = extraction_messages("<speak>Speaker: Bob</speak> Order my sister's tea.", kg.relations())
    assert (
        "<relationship>sister" in messages[0]["content"]
        and "<relationship>prefer_tea" in messages[0]["content"]
    )
    expected = "([['Bob', 'sister', 'Carol'], ['Carol', 'prefer_tea', 'tea_0001']])"
    assert run('KG.search(start="Bob", path=["sister","prefer_tea"])', kg, "exact").text == expected
    # "favourite_tea" is made up: greedy walks every edge of Carol, retrieval asks the retriever.
    assert (
        run('KG.search(start="Bob", path=["sister","favourite_tea"])', kg, "greedy").text
        == expected + BAD_EXTRACT
    )

    def nearest(relation, relations, k):
        return ["prefer_tea"] if "prefer_tea" in relations else []

    text = 'KG.search(start="Bob", path=["sister","favourite_tea"])'
    assert extract(text, kg, "retrieval", retriever=nearest, reading="paper").text == expected
    # Officially the hop is checked at Bob, who has no prefer_tea: it is skipped.
    assert extract(text, kg, "retrieval", retriever=nearest).text == "([['Bob', 'sister', 'Carol']])"
    kg.remove("Carol", "prefer_tea", "tea_0001")
    assert "<relationship>prefer_tea" not in extraction_messages("q", kg.relations())[0]["content"]


def test_options_are_checked(kg):
    with pytest.raises(ConfigError, match="unknown extraction"):
        extract("", kg, "fuzzy")
    with pytest.raises(ConfigError, match="unknown reading"):
        extract("", kg, "greedy", reading="prose")
    with pytest.raises(ConfigError, match="needs a retriever"):
        extract("", kg, "retrieval")
    with pytest.raises(ConfigError, match="does not hold"):
        extract('KG.search(start="Bob", path=["dad"])', kg, "retrieval", retriever=lambda r, rs, k: ["uncle"])


def test_think_text_is_put_back_and_raw_tool_calls_parse_all_or_nothing():
    message = {"content": "answer", "reasoning_content": 'KG.search(start="Bob", path=["father"])'}
    assert parse_search_calls(reply_text(message))[0].start == "Bob"
    good = '<tool_call>{"name": "cancel_alarm", "arguments": {"label": "x"}}</tool_call>'
    [call] = parse_hermes_tool_calls(good)
    assert call["function"] == {"name": "cancel_alarm", "arguments": '{"label": "x"}'}
    assert parse_hermes_tool_calls(good + '<tool_call>{"name": "f", "parameters": {}}</tool_call>') == []
    assert parse_hermes_tool_calls(good + "<tool_call>{not json</tool_call>") == []
    assert (
        len(parse_hermes_tool_calls(good + '\n<tool_call>{"name": "f", "arguments": {}}')) == 2
    )  # unclosed last
