"""KG2Tool task assembly and `hopgym kg2tool sample` on the real FB15k-237 and family KGs."""

from __future__ import annotations

import json
import re

import pytest

from hopgym.cli import main
from hopgym.errors import ConfigError, DataError
from hopgym.tasks.fol.queries import PATTERN_NAMES, execute
from hopgym.tasks.kg2tool.assembly import NEGATION, load_kg_source, parse_patterns, sample_tasks
from hopgym.tasks.kg2tool.generated_tools import committed_tools
from hopgym.tasks.kg2tool.task_file import read_tasks, task_from_record, write_tasks
from tests.shared_data import DATA, needs_data

pytestmark = needs_data("fb15k-237/train2id.txt")
# Calls a solution needs per pattern: one per projection, one per union or intersection of several
# positive branches, one per complement.
CALLS = {
    "1p": 1, "2p": 2, "3p": 3, "2i": 3, "3i": 4, "pi": 4, "ip": 4, "2u": 3, "up": 4,
    "2in": 3, "3in": 5, "inp": 4, "pin": 4, "pni": 4,
}  # fmt: skip


@pytest.fixture(scope="module")
def fb():
    return load_kg_source("fb15k-237")


@pytest.fixture(scope="module")
def tasks(fb):
    return sample_tasks(fb, PATTERN_NAMES, 10, seed=3)


@pytest.fixture(scope="module")
def raw_pairs():
    """relation -> {(head mid, tail mid)} read straight from the OpenKE id files, without the KG store."""
    folder = DATA / "fb15k-237"

    def names(file):
        text = (folder / file).read_text(encoding="utf-8").replace("\r\n", "\n")
        return [line.split("\t")[0] for line in text.split("\n")[1:] if line]

    entities, relations = names("entity2id.txt"), names("relation2id.txt")
    pairs = {}
    for split in ("train2id.txt", "valid2id.txt", "test2id.txt"):
        for line in (folder / split).read_text().split("\n")[1:]:
            if line:
                h, t, r = map(int, line.split())
                pairs.setdefault(relations[r], set()).add((entities[h], entities[t]))
    return pairs


def test_every_task_has_the_contract_fields_and_a_consistent_solution(fb, tasks):
    assert [task.pattern for task in tasks] == [p for p in PATTERN_NAMES for _ in range(10)]
    tool_names = {tool.name for tool in committed_tools("fb15k-237")}
    for task in tasks:
        record = json.loads(json.dumps(task.to_record()))
        assert set(record) >= {"id", "kg", "pattern", "fol", "query", "answers", "solution"}
        assert record["kg"] == "fb15k-237"
        assert record["answers"] == sorted(record["answers"]) == execute(task.fol, fb.kg)
        assert len(task.solution) == CALLS[task.pattern]
        assert task.solution[-1].result == list(task.answers)
        for call in record["solution"]:
            assert set(call) >= {"name", "arguments", "result"}
            assert call["name"] in tool_names
            assert call["goal"]
        assert task.query.startswith("Find ") and task.query.endswith(".")
        assert ("but not" in task.query) == ("n" in task.pattern)


def test_solution_calls_check_out_against_the_raw_triples(fb, tasks, raw_pairs):
    """Recompute every call's result by brute force: projections over the raw triples, set tools by sets."""
    tools = fb.tools_by_name()
    for task in tasks:
        for call in task.solution:
            tool = tools[call.name]
            if tool.kind == "relation":
                (argument,) = call.arguments.values()
                sources = {argument} if isinstance(argument, str) else set(argument)
                pairs = raw_pairs[tool.relation]
                expected = (
                    {h for h, t in pairs if t in sources}
                    if tool.inverse
                    else {t for h, t in pairs if h in sources}
                )
            elif call.name == NEGATION:
                expected = set(call.arguments["within"]) - set(call.arguments["entities"])
            else:
                sets = [set(items) for items in call.arguments["sets"]]
                expected = set.intersection(*sets) if "intersection" in call.name else set.union(*sets)
            assert call.result == sorted(expected), (task.id, call.name)


def test_a_hand_checked_instance(fb, raw_pairs):
    """English Studies (/m/01zc2w) majors: the tool called, its argument and its result, from raw triples."""
    task = next(t for t in sample_tasks(fb, ["pni"], 1, seed=7))
    first = task.solution[0]
    assert first.name == "education__get_students_majoring_student_of_field_of_study"
    assert first.arguments == {"field_of_study": "/m/01zc2w"}
    relation = "/education/field_of_study/students_majoring./education/education/student"
    assert first.result == sorted(t for h, t in raw_pairs[relation] if h == "/m/01zc2w")
    assert "English Studies (/m/01zc2w)" in task.query
    assert task.solution[-1].name == NEGATION


def test_anchor_arguments_are_single_entities_and_later_ones_whole_lists(tasks):
    for task in (t for t in tasks if t.pattern == "3p"):
        first, second, third = task.solution
        assert isinstance(next(iter(first.arguments.values())), str)
        assert next(iter(second.arguments.values())) == first.result
        assert next(iter(third.arguments.values())) == second.result
        assert "step 1" in second.goal and "step 2" in third.goal


def test_sampling_twice_writes_identical_bytes_and_the_file_reads_back(tmp_path, tasks, capsys):
    first, second, other = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    argv = ["kg2tool", "sample", "--kg", "fb15k-237", "--patterns", "2p,3in,up", "--n", "5", "--seed", "11"]
    assert main([*argv, "--out", str(first)]) == 0
    assert main([*argv, "--out", str(second)]) == 0
    assert first.read_bytes() == second.read_bytes()
    assert "15 tasks" in capsys.readouterr().out
    assert main([*argv[:-1], "12", "--out", str(other)]) == 0
    assert other.read_bytes() != first.read_bytes()
    loaded = read_tasks(first)
    assert [t.pattern for t in loaded] == ["2p"] * 5 + ["3in"] * 5 + ["up"] * 5
    write_tasks(loaded, second)
    assert second.read_bytes() == first.read_bytes()


def test_family_kg_tasks_use_names_and_the_kg2tool_tools():
    family = load_kg_source("family-e")
    for task in sample_tasks(family, ["1p", "2i", "ip", "inp"], 5, seed=0):
        assert task.kg == "family-e"
        assert all(family.kg.has_entity(answer) for answer in task.answers)
        assert task.solution[-1].result == list(task.answers)
        for anchor in _anchors(task.fol):  # mentioned by name alone: the name is the id the tools take
            assert anchor in task.query and f"({anchor})" not in task.query


def _anchors(tree):
    if tree["op"] == "e":
        return [tree["entity"]]
    return _anchors(tree["arg"]) if "arg" in tree else [a for arg in tree["args"] for a in _anchors(arg)]


def test_bad_inputs_are_named():
    with pytest.raises(ConfigError, match="unknown FOL pattern"):
        parse_patterns("2p,4p")
    with pytest.raises(ConfigError, match="unknown KG"):
        load_kg_source("wikidata")
    assert parse_patterns("all") == list(PATTERN_NAMES)


def test_malformed_task_records_are_rejected(tasks):
    good = tasks[0].to_record()
    assert task_from_record(good) == tasks[0]
    with pytest.raises(DataError, match="pattern"):
        task_from_record({**good, "pattern": "2p"})
    with pytest.raises(DataError, match="sorted"):
        task_from_record({**good, "answers": list(reversed(good["answers"])) + good["answers"][:1]})
    with pytest.raises(DataError, match="lacks the field"):
        task_from_record({key: value for key, value in good.items() if key != "solution"})
    with pytest.raises(DataError, match="result"):
        task_from_record({**good, "solution": [{"name": "x", "arguments": {}, "result": "a"}]})


def test_refine_with_a_model_rewords_queries_and_keeps_mentions(tmp_path, capsys):
    """`--refine-with` through a real HTTP model server: the paper's prompt structure goes out, a reply
    that drops an entity mention keeps the template query (and is reported)."""
    from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply

    def translator(request):
        system, user = (message["content"] for message in request["messages"])
        assert system.startswith("# Role") and "## Examples" in system
        instance = json.loads(user.split("```json\n", 1)[1].split("\n```", 1)[0])
        assert set(instance) == {"FOL_pattern", "FOL_query", "predicates"}
        mentions = re.findall(r"\(([^(),]+ \(/m/[^)]+\)), [a-x]\)", instance["FOL_query"])
        if instance["FOL_pattern"].startswith("q = ?x: (pred1"):  # up: forget the entities
            return ScriptedReply(content='{"Natural Language Question": "Who is it?"}')
        question = "Which entity relates to " + " and ".join(mentions) + "?"
        return ScriptedReply(content=json.dumps({"Natural Language Question": question}))

    out = tmp_path / "refined.jsonl"
    argv = ["kg2tool", "sample", "--kg", "fb15k-237", "--patterns", "2p,up", "--n", "2", "--seed", "3"]
    with ScriptedModelServer(translator) as server:
        code = main([*argv, "--out", str(out), "--refine-with", server.model, "--api-base",
                     server.api_base, "--api-key", "sk"])  # fmt: skip
    assert code == 0
    refined = {task.pattern: task for task in read_tasks(out)}
    assert refined["2p"].query.startswith("Which entity relates to ")
    assert refined["2p"].query_template.startswith("Find ")
    assert refined["up"].query.startswith("Find ") and refined["up"].query_template is None
    error = capsys.readouterr().err
    assert "kept the template query of fb15k-237-up-s3-00000" in error and "drops the entity" in error
