"""Instruction data (`hopgym kg2tool export`): formats, round trip, step questions, corrupted reviews."""

from __future__ import annotations

import json
import os
import random
import stat
import threading

import pytest

from hopgym.cli import main
from hopgym.errors import ConfigError, DataError
from hopgym.tasks.kg2tool.assembly import load_kg_source, sample_tasks
from hopgym.tasks.kg2tool.export import (
    ANSWER_QUESTION,
    CORRUPTIONS,
    EXPORT_FORMATS,
    GOAL_QUESTION,
    SYSTEM_PROMPT,
    TOOL_LIST_INTRO,
    TOOL_QUESTION,
    answer_text,
    corrupt_result,
    export_records,
    plan_text,
    read_export,
    read_trajectory,
    validate_record,
    write_export,
)
from tests.shared_data import needs_data

pytestmark = needs_data("fb15k-237/train2id.txt")
PATTERNS = ["1p", "3p", "2i", "ip", "up", "3in", "pni"]


@pytest.fixture(scope="module")
def fb():
    return load_kg_source("fb15k-237")


@pytest.fixture(scope="module")
def tasks(fb):
    return sample_tasks(fb, PATTERNS, 4, seed=5)


@pytest.fixture(scope="module")
def task_file(tmp_path_factory, tasks):
    from hopgym.tasks.kg2tool.task_file import write_tasks

    path = tmp_path_factory.mktemp("kg2tool") / "tasks.jsonl"
    write_tasks(tasks, path)
    return path


def _tools_for(fb):
    documents = fb.tools_by_name()
    return lambda task: [documents[name].openai_schema()["function"] for name in task.tool_names]


def first_question(record, fmt):
    if fmt == "sharegpt":
        return record["conversations"][0]["value"]
    if fmt == "openai":
        return record["messages"][1]["content"]
    return record["history"][0][0] if record["history"] else record["instruction"]


def offered_tools(record, fmt):
    """The function documents a record lists, from wherever its format keeps them."""
    if fmt == "sharegpt":
        return json.loads(record["tools"])
    if fmt == "openai":
        return [tool["function"] for tool in record["tools"]]
    return json.loads(record["system"].removeprefix(SYSTEM_PROMPT + TOOL_LIST_INTRO))


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_the_export_command_writes_valid_records_that_round_trip(fb, tasks, task_file, tmp_path, fmt):
    out = tmp_path / f"data.{'json' if fmt == 'sharegpt' else 'jsonl'}"
    documents = _tools_for(fb)
    assert main(["kg2tool", "export", "--tasks", str(task_file), "--format", fmt, "--out", str(out)]) == 0
    records = read_export(out)
    for record in records:
        validate_record(record, fmt)
    by_task = {}
    for record in records:
        by_task.setdefault(record["task_id"], []).append(record["kind"])
    assert by_task == {task.id: ["trajectory", "steps", "plan", "review", "review"] for task in tasks}
    trajectories = [record for record in records if record["kind"] == "trajectory"]
    for task, record in zip(tasks, trajectories, strict=True):
        assert task.query in first_question(record, fmt)
        offered = offered_tools(record, fmt)  # every tool the solution calls, once, as documented
        assert sorted(offered, key=lambda doc: doc["name"]) == sorted(
            documents(task), key=lambda d: d["name"]
        )
        loaded = read_trajectory(record, fmt)
        assert loaded.calls == tuple((c.name, c.arguments, c.result) for c in task.solution)
        assert loaded.answer == tuple(sorted({fb.label(a) for a in task.answers}))


def test_sharegpt_trajectories_alternate_calls_and_responses(fb, tasks):
    for record in export_records(tasks, "sharegpt", _tools_for(fb), fb.label, kinds=["trajectory"]):
        roles = [turn["from"] for turn in record["conversations"]]
        calls = roles.count("function_call")
        assert roles == ["human", *(["function_call", "observation"] * calls), "gpt"]
        assert json.loads(record["tools"]) and isinstance(record["tools"], str)


def test_step_questions_follow_the_solution(fb, tasks):
    for task, record in zip(
        tasks, export_records(tasks, "sharegpt", _tools_for(fb), fb.label, kinds=["steps"]), strict=True
    ):
        turns = [(turn["from"], turn["value"]) for turn in record["conversations"]]
        goals = [turns[k + 1][1] for k, (role, text) in enumerate(turns) if text.endswith(GOAL_QUESTION)]
        tools = [turns[k + 1][1] for k, (role, text) in enumerate(turns) if text == TOOL_QUESTION]
        assert goals == [call.goal for call in task.solution]
        assert tools == [call.name for call in task.solution]
        assert turns[0][1].startswith(task.query)
        assert turns[-2:] == [("human", ANSWER_QUESTION), ("gpt", answer_text(task, fb.label))]


def test_plans_number_every_step(fb, tasks):
    for task in tasks:
        plan = plan_text(task)
        assert plan.count(". ") >= len(task.solution)
        assert plan.startswith("1. ") and f"{len(task.solution)}. {task.solution[-1].goal}" in plan


def _review_response(record, fmt):
    line = next(
        line for line in first_question(record, fmt).split("\n") if line.startswith("Tool response: ")
    )
    verdicts = {"sharegpt": ("conversations", 1, "value"), "openai": ("messages", 2, "content")}
    column, position, key = verdicts.get(fmt, ("", 0, ""))
    verdict = record[column][position][key] if column else record["output"]
    return json.loads(line.removeprefix("Tool response: ")), verdict


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_corrupted_reviews_differ_from_the_truth(fb, tasks, fmt):
    records = list(export_records(tasks, fmt, _tools_for(fb), fb.label, seed=1, kinds=["review"]))
    assert len(records) == 2 * len(tasks)
    for truthful, corrupted in zip(records[::2], records[1::2], strict=True):
        true_response, yes = _review_response(truthful, fmt)
        wrong_response, no = _review_response(corrupted, fmt)
        assert (yes, no) == ("Yes", "No")
        assert any(call.result == true_response for call in _task(tasks, truthful).solution)
        assert set(wrong_response) != set(true_response)


def _task(tasks, record):
    return next(task for task in tasks if task.id == record["task_id"])


def test_the_export_is_deterministic_per_seed(fb, tasks):
    def dump(seed):
        return [json.dumps(r) for r in export_records(tasks, "alpaca", _tools_for(fb), fb.label, seed=seed)]

    assert dump(3) == dump(3)
    assert dump(3) != dump(4)  # review corruptions are drawn from the seed


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_every_corruption_changes_the_set(how):
    rng = random.Random(0)
    pool = ["/m/a", "/m/b", "/m/c", "/m/d"]
    for truth in (["/m/a"], ["/m/a", "/m/b"], ["/m/a", "/m/b", "/m/c"], []):
        for _ in range(20):
            assert set(corrupt_result(truth, how, pool, rng)) != set(truth)
    with pytest.raises(ConfigError, match="unknown corruption"):
        corrupt_result(["/m/a"], "shuffle", pool, rng)


def test_malformed_records_are_rejected(fb, tasks):
    record = next(export_records(tasks, "sharegpt", _tools_for(fb), fb.label, kinds=["trajectory"]))
    turns = record["conversations"]
    with pytest.raises(DataError, match="expected one of"):
        validate_record({**record, "conversations": [turns[0], turns[2], turns[1], *turns[3:]]}, "sharegpt")
    with pytest.raises(DataError, match="starts with human"):
        call = {"from": "function_call", "value": json.dumps({"name": "x", "arguments": {}})}
        validate_record({**record, "conversations": [*turns[:-1], call]}, "sharegpt")
    with pytest.raises(DataError, match="history"):
        validate_record({"id": "x", "task_id": "x", "kind": "plan", "instruction": "q", "input": "",
                         "output": "a", "system": "", "history": [["only one"]]}, "alpaca")  # fmt: skip
    with pytest.raises(ConfigError, match="unknown export format"):
        next(export_records(tasks, "parquet", _tools_for(fb), fb.label))


def test_sharegpt_lists_the_tools_once_in_their_column_not_in_the_system_prompt(fb, tasks):
    for record in export_records(tasks, "sharegpt", _tools_for(fb), fb.label):
        tools = json.loads(record["tools"])
        assert record["system"] == SYSTEM_PROMPT and tools
        text = json.dumps(record, ensure_ascii=False)
        for tool in tools:  # each description appears once in the whole record (the tools column)
            assert text.count(json.dumps(tool["description"], ensure_ascii=False)[1:-1]) == 1


def test_openai_records_are_chat_messages_with_tool_calls_answered_by_id(fb, tasks):
    tools_for = _tools_for(fb)
    records = list(export_records(tasks, "openai", tools_for, fb.label, kinds=["trajectory", "steps"]))
    assert len(records) == 2 * len(tasks)
    for record in records:
        validate_record(record, "openai")
        task = _task(tasks, record)
        assert set(record) == {"messages", "tools", "id", "task_id", "kind"}
        assert record["tools"] == [{"type": "function", "function": doc} for doc in tools_for(task)]
        messages = record["messages"]
        assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
        assert messages[1]["role"] == "user" and messages[1]["content"].startswith(task.query)
        assert messages[-1] == {"role": "assistant", "content": answer_text(task, fb.label)}
        calls = [m for m in messages if m.get("tool_calls")]
        responses = [m for m in messages if m["role"] == "tool"]
        assert len(calls) == len(responses) == len(task.solution)
        for call_message, response, step in zip(calls, responses, task.solution, strict=True):
            assert call_message["role"] == "assistant" and call_message["content"] is None
            (call,) = call_message["tool_calls"]
            assert call["type"] == "function" and call["function"]["name"] == step.name
            assert json.loads(call["function"]["arguments"]) == step.arguments  # a JSON string, as OpenAI's
            assert messages[messages.index(call_message) + 1] is response
            assert response["tool_call_id"] == call["id"] and response["name"] == step.name
            assert json.loads(response["content"]) == step.result
        assert len({m["tool_calls"][0]["id"] for m in calls}) == len(calls)
        assert json.loads(json.dumps(record)) == record  # plain JSON, one line per record


def test_malformed_openai_records_are_rejected(fb, tasks):
    record = next(export_records(tasks, "openai", _tools_for(fb), fb.label, kinds=["trajectory"]))
    messages = record["messages"]
    call_at = next(k for k, m in enumerate(messages) if m.get("tool_calls"))
    wrong_id = [*messages[: call_at + 1], {**messages[call_at + 1], "tool_call_id": "call_99"}]
    with pytest.raises(DataError, match="answers no pending tool call"):
        validate_record({**record, "messages": [*wrong_id, *messages[call_at + 2 :]]}, "openai")
    with pytest.raises(DataError, match="which 'tools' does not list"):
        validate_record(
            {**record, "tools": record["tools"][1:] if len(record["tools"]) > 1 else []}, "openai"
        )
    with pytest.raises(DataError, match="starts with the system message"):
        validate_record({**record, "messages": messages[1:]}, "openai")
    call = messages[call_at]["tool_calls"][0]
    as_object = {
        **call,
        "function": {**call["function"], "arguments": json.loads(call["function"]["arguments"])},
    }
    unencoded = [
        *messages[:call_at],
        {**messages[call_at], "tool_calls": [as_object]},
        *messages[call_at + 1 :],
    ]
    with pytest.raises(DataError, match="arguments must be a JSON object in a string"):
        validate_record({**record, "messages": unencoded}, "openai")


RECORDS = [
    {"id": "t/0", "history": [], "text": 'two\nlines, "quoted", ü', "nested": {"b": [1, {"c": None}]}},
    {"id": "t/1", "empty": {}, "list": []},
]


@pytest.mark.parametrize("records", [RECORDS, []])
def test_exports_are_written_as_they_come_in_the_usual_bytes(tmp_path, records):
    """A ``.json`` export is the bytes ``json.dumps(records, indent=1)`` gives (non-ASCII kept), a JSON
    Lines one a sorted line per record, though records are written one by one (no list in memory)."""
    assert write_export(iter(records), tmp_path / "data.json") == len(records)
    array = json.dumps(records, ensure_ascii=False, indent=1) + "\n"
    assert (tmp_path / "data.json").read_text(encoding="utf-8") == array
    assert write_export(iter(records), tmp_path / "data.jsonl") == len(records)
    lines = "".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in records)
    assert (tmp_path / "data.jsonl").read_text(encoding="utf-8") == lines
    assert read_export(tmp_path / "data.json") == records == read_export(tmp_path / "data.jsonl")


def test_an_interrupted_export_leaves_no_file_under_its_name(tmp_path):
    def records_then_a_failure():
        yield RECORDS[0]
        raise KeyboardInterrupt

    (tmp_path / "data.json").write_text("the previous export\n")
    with pytest.raises(KeyboardInterrupt):
        write_export(records_then_a_failure(), tmp_path / "data.json")
    assert (tmp_path / "data.json").read_text() == "the previous export\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data.json"]


def test_an_export_to_a_pipe_is_written_through_and_a_link_keeps_pointing_at_its_file(tmp_path):
    pipe = tmp_path / "pipe.jsonl"
    os.mkfifo(pipe)
    received = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_text(encoding="utf-8")))
    reader.start()
    assert write_export(iter(RECORDS), pipe) == 2
    reader.join(timeout=30)
    assert [json.loads(line) for line in received[0].splitlines()] == RECORDS
    assert stat.S_ISFIFO(pipe.stat().st_mode)
    (tmp_path / "real.json").write_text("old\n")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    assert write_export(iter(RECORDS), tmp_path / "link.json") == 2
    assert (tmp_path / "link.json").is_symlink() and read_export(tmp_path / "real.json") == RECORDS
