"""Instruction data (`hopgym kg2tool export`): formats, round trip, step questions, corrupted reviews."""

from __future__ import annotations

import json
import random

import pytest

from hopgym.cli import main
from hopgym.errors import ConfigError, DataError
from hopgym.tasks.kg2tool import load_kg_source, sample_tasks
from hopgym.tasks.kg2tool_export import (
    ANSWER_QUESTION,
    CORRUPTIONS,
    EXPORT_FORMATS,
    GOAL_QUESTION,
    TOOL_QUESTION,
    answer_text,
    corrupt_result,
    export_records,
    plan_text,
    read_export,
    read_trajectory,
    validate_record,
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
    from hopgym.tasks.kg2tool_model import write_tasks

    path = tmp_path_factory.mktemp("kg2tool") / "tasks.jsonl"
    write_tasks(tasks, path)
    return path


def _tools_for(fb):
    documents = fb.tools_by_name()
    return lambda task: [documents[name].openai_schema()["function"] for name in task.tool_names]


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_the_export_command_writes_valid_records_that_round_trip(fb, tasks, task_file, tmp_path, fmt):
    out = tmp_path / f"data.{'json' if fmt == 'sharegpt' else 'jsonl'}"
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
        assert task.query in (
            record["conversations"][0]["value"] if fmt == "sharegpt" else record["history"][0][0]
        )
        system = record["system"]
        for name in task.tool_names:  # the system prompt lists every tool the solution calls
            assert f'"name": "{name}"' in system
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
    question = record["conversations"][0]["value"] if fmt == "sharegpt" else record["instruction"]
    line = next(line for line in question.split("\n") if line.startswith("Tool response: "))
    verdict = record["conversations"][1]["value"] if fmt == "sharegpt" else record["output"]
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
        next(export_records(tasks, "openai", _tools_for(fb), fb.label))
