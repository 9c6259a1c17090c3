"""Tools generated from KG relations: naming, committed files, and execution in the real sandbox.

Runs on the real data ($HOPGYM_DATA: familytool/, fb15k-237/) and the real process sandbox.
"""

from __future__ import annotations

import ast
import filecmp
import json

import pytest

from hopgym.envs.kg_tool_runtime import KGToolRuntime
from hopgym.errors import ConfigError, SandboxError
from hopgym.sandbox import make_sandbox
from hopgym.tasks.familytool.dataset import load_family_kg, load_familytool
from hopgym.tasks.kg.fb15k237 import load_fb15k237
from hopgym.tasks.kg.graph import KnowledgeGraph
from hopgym.tasks.kg2tool.generated_tools import (
    GENERATED_DIR,
    KNOWN_KGS,
    MODULE_FILE,
    NAME_PATTERN,
    TOOLS_FILE,
    committed_tools,
    generate_kg_tools,
    read_tools,
    tools_for_kg,
    write_tools,
)


@pytest.fixture(scope="module")
def sandbox():
    with make_sandbox("process") as shared:
        yield shared


@pytest.fixture(scope="module")
def fb15k():
    return load_fb15k237()


@pytest.fixture(scope="module")
def fb_runtime(fb15k):
    with make_sandbox("process", timeout=30) as box:
        runtime = KGToolRuntime(fb15k.kg, box, watch=False)
        runtime.load(generate_kg_tools(fb15k.kg, "kg2tool", fb15k.relation_texts))
        yield runtime


# -- generation and committed files ----------------------------------------------------------------------


@pytest.mark.parametrize("kg_name", KNOWN_KGS)
def test_committed_tools_are_reproduced_byte_for_byte(kg_name, tmp_path):
    write_tools(tools_for_kg(kg_name), tmp_path)
    for filename in (TOOLS_FILE, MODULE_FILE):
        assert filecmp.cmp(tmp_path / filename, GENERATED_DIR / kg_name / filename, shallow=False), filename


def test_cli_regenerates_family_e_identically(tmp_path):
    from hopgym.cli import main

    assert main(["tools", "generate", "--kg", "family-e", "--out", str(tmp_path)]) == 0
    assert (tmp_path / MODULE_FILE).read_bytes() == (GENERATED_DIR / "family-e" / MODULE_FILE).read_bytes()
    assert main(["tools", "generate", "--kg", "family-e", "--check"]) == 0
    (tmp_path / MODULE_FILE).write_text("# stale\n")
    assert main(["tools", "generate", "--kg", "family-e", "--out", str(tmp_path), "--check"]) == 2


@pytest.mark.parametrize("kg_name", KNOWN_KGS)
def test_committed_tools_read_back_and_are_valid(kg_name):
    tools = committed_tools(kg_name)
    names = [tool.name for tool in tools]
    assert len(names) == len(set(names))
    assert all(NAME_PATTERN.match(name) and name.isidentifier() for name in names)
    module = ast.parse((GENERATED_DIR / kg_name / MODULE_FILE).read_text())
    assert [node.name for node in module.body if isinstance(node, ast.FunctionDef)] == names
    for tool in tools:
        function = ast.parse(tool.source).body[0]
        assert [a.arg for a in function.args.args] == list(tool.parameters["properties"])
        assert tool.parameters["required"] == list(tool.parameters["properties"])


def test_family_tools_cover_every_relation_plus_search():
    kg = load_family_kg("e")
    tools = generate_kg_tools(kg, "family")
    assert [t.relation for t in tools if t.kind == "relation"] == kg.relations()
    assert tools[-1].name == "kg_search" and tools[-1].kind == "search"
    assert {t.name for t in tools if t.relation == "prefer_dinnertime"} == {"kg_prefer_dinnertime"}


def test_family_names_are_sanitised_and_never_collide():
    tools = generate_kg_tools(["best friend-of", "best_friend_of", "search", "x" * 80], "family")
    names = [t.name for t in tools]
    assert names == ["kg_best_friend_of", "kg_best_friend_of_2", "kg_search_2", "kg_" + "x" * 61, "kg_search"]
    assert all(NAME_PATTERN.match(name) for name in names)


def test_kg2tool_names_follow_domain_get_x_of_y(fb15k):
    tools = generate_kg_tools(fb15k.kg, "kg2tool", fb15k.relation_texts)
    by_relation = {(t.relation, t.inverse): t for t in tools if t.kind == "relation"}
    assert len(by_relation) == 2 * len(fb15k.kg.relations()) == 474
    language = by_relation[("/film/film/language", False)]
    assert language.name == "film__get_language_of_film"
    assert list(language.parameters["properties"]) == ["film"]
    assert by_relation[("/film/film/language", True)].name == "film__get_films_of_language"
    nationality = by_relation[("/people/person/nationality", True)]
    assert nationality.name == "people__get_persons_of_nationality"  # the paper's own example
    composite = "/film/film/release_date_s./film/film_regional_release_date/film_release_region"
    assert by_relation[(composite, False)].name == "film__get_release_date_s_film_release_region_of_film"
    assert [t.name for t in tools[-3:]] == ["get_intersection_of", "get_union_of", "get_negation_of"]


def test_kg2tool_cuts_long_names_and_numbers_collisions():
    long_type = "/music/" + "very_long_type_name_" * 4 + "/x/genre"
    relations = ["/a/film/language", "/a/film/language./b/c/language", "/a/film/language_", long_type]
    names = [t.name for t in generate_kg_tools(relations, "kg2tool") if t.kind == "relation"]
    assert names[:2] == ["a__get_language_of_film", "a__get_films_of_language"]
    assert names[4:6] == ["a__get_language_of_film_2", "a__get_films_of_language_2"]
    assert all(len(name) <= 64 for name in names)
    assert len(set(names)) == len(names)
    assert names[6] == "music_very_long_type_name_very_long_type_name_very_long_type_nam"[:64]


def test_unknown_style_is_rejected():
    with pytest.raises(ConfigError, match="family, kg2tool"):
        generate_kg_tools(["mother"], "fancy")


def test_read_tools_round_trips(tmp_path):
    tools = generate_kg_tools(load_family_kg("b"), "family")
    write_tools(tools, tmp_path)
    assert read_tools(tmp_path) == tools


# -- execution in the sandbox ------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["b", "e"])
def test_family_relation_tools_return_the_graphs_tails(sandbox, variant):
    kg = load_family_kg(variant)
    tools = generate_kg_tools(kg, "family")
    runtime = KGToolRuntime(kg, sandbox)
    loaded = runtime.load(tools)
    assert set(runtime.tool_names) <= set(loaded.functions)
    heads = sorted({head for head, _, _ in kg})
    for tool in tools[:-1]:
        for head in heads:
            result = runtime.call(tool.name, {"entity": head})
            assert result.status == "ok", result.error
            assert result.value == kg.tails(head, tool.relation)


@pytest.mark.parametrize("variant", ["b", "e"])
def test_kg_search_walks_every_gold_path(sandbox, variant):
    """Each gold sub-KG that is one chain from its first head is what kg_search returns for its path."""
    kg = load_family_kg(variant)
    runtime = KGToolRuntime(kg, sandbox)
    runtime.load(generate_kg_tools(kg, "family"))
    walked = 0
    for task in load_familytool(variant):
        chain = task.gold_subkg
        if any(chain[i][2] != chain[i + 1][0] for i in range(len(chain) - 1)):
            continue
        expected = kg.search(chain[0][0], [r for _, r, _ in chain], first_tail_only=True)
        result = runtime.call("kg_search", {"start": chain[0][0], "path": [r for _, r, _ in chain]})
        assert result.value["complete"] is True
        assert [tuple(t) for t in result.value["triples"]] == list(expected.triples)
        walked += expected.triples == chain
    assert walked > 0.9 * len(load_familytool(variant))


def test_kg_search_expands_a_made_up_hop_like_the_official_greedy_search(sandbox):
    kg = load_family_kg("e")
    runtime = KGToolRuntime(kg, sandbox)
    runtime.load(generate_kg_tools(kg, "family"))
    result = runtime.call("kg_search", {"start": "Jack", "path": ["father", "prefer_alcohol_store"]}).value
    assert result["complete"] is False and result["failed_relation"] == "prefer_alcohol_store"
    father = kg.tails("Jack", "father")[0]
    expected = [("Jack", "father", father), *kg.out_edges(father)]
    assert [tuple(t) for t in result["triples"]] == expected
    unknown = runtime.call("kg_search", {"start": "Nobody", "path": ["father"]})
    assert unknown.status == "error" and "unknown entity 'Nobody'" in unknown.error


def test_next_call_sees_kg_mutations(sandbox):
    kg = load_family_kg("e")
    runtime = KGToolRuntime(kg, sandbox)
    runtime.load(generate_kg_tools(kg, "family"))
    assert runtime.call("kg_search", {"start": "Jack", "path": ["best_friend"]}).value["complete"] is False
    kg.add("Jack", "best_friend", "Zoe")
    kg.add("Zoe", "prefer_cuisine", "cuisine_0042")
    walk = runtime.call("kg_search", {"start": "Jack", "path": ["best_friend", "prefer_cuisine"]}).value
    assert walk["triples"] == [["Jack", "best_friend", "Zoe"], ["Zoe", "prefer_cuisine", "cuisine_0042"]]
    mother = kg.tails("Alice", "mother")[0]
    kg.remove("Alice", "mother", mother)
    assert runtime.call("kg_mother", {"entity": "Alice"}).value == []
    assert "kg_best_friend" in {t.name for t in generate_kg_tools(kg, "family")}


def test_runtime_serves_fb15k_tools(fb15k, fb_runtime):
    kg = fb15k.kg
    titanic = fb15k.mids_named("Titanic")[0]
    language = kg.relation_id("/film/film/language")
    expected = sorted(
        kg.entity_name(i) for i in kg.project_ids([kg.entity_id(titanic)], language, inverse=False)
    )
    assert fb_runtime.call("film__get_language_of_film", {"film": titanic}).value == expected
    english = fb15k.mids_named("English Language")[0]
    films = fb_runtime.call("film__get_films_of_language", {"language": [english]}).value
    assert titanic in films and films == sorted(films)
    both = fb_runtime.call("get_intersection_of", {"sets": [films, [*expected, titanic]]}).value
    assert both == [titanic]
    assert fb_runtime.call("get_union_of", {"sets": [[titanic], expected]}).value == sorted(
        {titanic, *expected}
    )
    rest = fb_runtime.call("get_negation_of", {"entities": [english], "within": expected}).value
    assert rest == [m for m in expected if m != english]
    unknown = fb_runtime.call("film__get_language_of_film", {"film": "/m/nothing"})
    assert unknown.status == "error" and "unknown entity" in unknown.error


def test_generated_tool_failing_to_load_is_an_error(sandbox):
    runtime = KGToolRuntime(KnowledgeGraph([("a", "r", "b")]), sandbox)
    tools = generate_kg_tools(["r"], "family")
    broken = [type(tools[0])(**{**tools[0].__dict__, "source": "def kg_r(entity):\n    return (\n"})]
    with pytest.raises(SandboxError, match="failed to load"):
        runtime.load(broken)
    assert json.dumps(tools[0].openai_schema())  # the schema itself is plain JSON


def test_family_tools_run_under_the_restricted_policy_too():
    kg = load_family_kg("e")
    with make_sandbox("process", policy="restricted", spares=0) as restricted:
        runtime = KGToolRuntime(kg, restricted)
        runtime.load(generate_kg_tools(kg, "family"))
        walk = runtime.call("kg_search", {"start": "Jack", "path": ["father"]}).value
        assert walk["triples"] == [["Jack", "father", kg.tails("Jack", "father")[0]]]
        assert "must be a string" in runtime.call("kg_mother", {"entity": 3}).error
