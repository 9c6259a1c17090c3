"""ToolTasks-v0: a task file written here runs through ``hopgym eval`` (scripted model server, real sandbox)
and ``hopgym view``; on the ToolHop subset it scores as ToolHop-v0 does for the same replies; a malformed
file names each bad row's line and problem before any episode starts."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import jsonschema
import pytest

import hopgym
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply
from hopgym.cli import main
from hopgym.envs.tooltasks.tasks import ROW_SCHEMA
from hopgym.errors import DataError
from hopgym.sandbox import make_sandbox
from tests.scripted_runs import read_records
from tests.servers import get_json
from tests.shared_data import SUBSET, needs_data


def tool(name: str, **parameters: str) -> dict[str, Any]:
    properties = {key: {"type": kind} for key, kind in parameters.items()}
    return {
        "name": name,
        "parameters": {"type": "object", "properties": properties, "required": list(properties)},
    }


ROWS = [
    {
        "question": "What is twice the number of moons of Mars?",
        "answer": "4",
        "functions": [
            "def moons(planet):\n    return {'Mars': 2, 'Earth': 1}[planet]",
            "def double(n):\n    return 2 * n",
        ],
        "tools": {"moons": tool("moons", planet="string"), "double": tool("double", n="integer")},
    },
    {
        "id": "plus-one",
        "question": "What is one more than the number of legs of a spider?",
        "answer": 9,
        "functions": ["def legs(animal):\n    return {'spider': 8}[animal]"],
        "tools": {"legs": tool("legs", animal="string")},
        "sub_task": {"How many legs has a spider?": "8"},
        "answer_type": "number",
    },
]
CALLS = {
    ROWS[0]["question"]: ("moons", {"planet": "Mars"}),
    ROWS[1]["question"]: ("legs", {"animal": "spider"}),
}


def write_rows(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def calling_policy(request: dict[str, Any]) -> ScriptedReply:
    """Calls the task's first tool, then answers with its gold answer."""
    messages = request["messages"]
    question = next(m["content"] for m in messages if m["role"] == "user")
    if messages[-1]["role"] != "tool":
        return ScriptedReply(tool_calls=(CALLS[question],))
    answer = next(str(row["answer"]) for row in ROWS if row["question"] == question)
    return ScriptedReply(content=f"The answer is {answer}.")


def test_hopgym_eval_and_view_run_a_task_file_written_here(tmp_path: Path) -> None:
    data, out = write_rows(tmp_path / "tasks.jsonl", ROWS), tmp_path / "run"
    with ScriptedModelServer(calling_policy) as server:
        args = ["eval", "--env", "ToolTasks-v0", "--data", str(data), "--env-arg", "protocol=hopgym"]
        args += ["--model", server.model, "--api-base", server.api_base, "--api-key", "sk", "--no-progress"]
        assert main([*args, "--out", str(out)]) == 0
    records = sorted(read_records(out), key=lambda record: record["task_id"])
    assert [(r["task_id"], r["correct"], r["reward"]) for r in records] == [
        ("1", True, 1.0),
        ("plus-one", True, 1.0),
    ]
    assert [[call["status"] for call in r["calls"]] for r in records] == [["ok"], ["ok"]]
    assert json.loads((out / "run.json").read_text())["env"] == "ToolTasks-v0"
    viewer = subprocess.Popen(
        [sys.executable, "-m", "hopgym.cli", "view", str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+/\?token=[\w-]+", viewer.stdout.readline()).group(0)
        (run,) = get_json(url, "/api/runs")
        assert sorted(outline["task_id"] for outline in run["outlines"]) == ["1", "plus-one"]
    finally:
        viewer.send_signal(signal.SIGTERM)
        assert viewer.wait(timeout=30) == 0


def test_a_malformed_file_names_each_bad_row_with_its_line_and_problem(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    no_answer = {key: value for key, value in ROWS[0].items() if key != "answer"}
    bad_code = {**ROWS[1], "functions": ["def legs(animal:\n    return 8"]}
    lines = [json.dumps(ROWS[0]), json.dumps(ROWS[1]), '{"question": "cut off', json.dumps(no_answer)]
    path.write_text("\n".join([*lines, json.dumps(bad_code)]) + "\n")
    with pytest.raises(DataError) as raised:
        gym.make("ToolTasks-v0", data_path=path, sandbox="process")
    message = str(raised.value)
    assert "3 bad row(s)" in message
    assert f"{path}:3: not JSON" in message
    assert f"{path}:4: 'answer' is a required property" in message
    assert f"{path}:5: " in message and "not valid Python" in message
    assert f"{path}:1:" not in message and f"{path}:2:" not in message


def test_hostile_rows_are_named_not_raised_and_repeated_ids_refused(tmp_path: Path) -> None:
    """A 5000-digit number and 100,000 nested brackets are bad rows with their line, never a traceback; two
    rows with one id would make reset by id, records and --resume mix two tasks up."""
    path = tmp_path / "hostile.jsonl"
    path.write_text(f'{{"answer": {"9" * 5000}}}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(DataError) as raised:
        gym.make("ToolTasks-v0", data_path=path, sandbox="process")
    assert f"{path}:1: not JSON it can read" in str(raised.value)
    assert f"{path}:2: not JSON it can read (nested too deep)" in str(raised.value)
    listed = tmp_path / "hostile.json"
    listed.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match=r"hostile\.json:1: not JSON it can read"):
        gym.make("ToolTasks-v0", data_path=listed, sandbox="process")
    twice = tmp_path / "twice.jsonl"
    twice.write_text("".join(json.dumps({**row, "id": "same"}) + "\n" for row in ROWS[:2]))
    with pytest.raises(DataError, match="task ids must be unique; repeated: same"):
        gym.make("ToolTasks-v0", data_path=twice, sandbox="process")


def test_a_json_list_names_the_line_each_bad_row_starts_on(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([ROWS[0], {**ROWS[1], "functions": "def f(): pass"}], indent=2))
    start = [i for i, line in enumerate(path.read_text().splitlines(), 1) if line == "  {"][1]
    with pytest.raises(
        DataError, match=rf"bad\.json:{start}: functions: 'def f\(\): pass' is not of type 'array'"
    ):
        gym.make("ToolTasks-v0", data_path=path, sandbox="process")


def test_the_published_schema_is_a_valid_json_schema_every_example_row_keeps() -> None:
    jsonschema.Draft202012Validator.check_schema(ROW_SCHEMA)
    example = Path(hopgym.__file__).parent / "envs" / "tooltasks" / "example.json"
    for row in [*ROWS, *json.loads(example.read_text())]:
        jsonschema.validate(row, ROW_SCHEMA)


def replies(task: Any, index: int) -> list[Any]:
    """The same scripted replies for both envs: call the first offered tool with its gold arguments when
    the task has some, then answer (the gold answer for two tasks of three)."""
    gold = task.gold_calls[0] if task.gold_calls else None
    name, arguments = (gold.name, gold.arguments) if gold else (task.tool_names[0], {})
    call = {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    answer = task.answer if index % 3 else "I do not know"
    return [{"role": "assistant", "content": None, "tool_calls": [call]}, f"The answer is {answer}."]


def outcome(env: gym.Env, index: int, actions: list[Any]) -> list[Any]:
    env.reset(options={"index": index})
    steps = []
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        calls = [(c["name"], c["status"], c["feedback"]) for c in info["calls"]]
        steps.append((reward, terminated, truncated, info.get("correct"), info.get("metrics"), calls))
        if terminated or truncated:
            break
    return steps


@needs_data("toolhop/official/evaluation_closed.py")
@pytest.mark.parametrize("protocol", ["official", "hopgym"])
def test_on_the_toolhop_subset_it_scores_as_toolhop(protocol: str) -> None:
    with make_sandbox("process") as sandbox:
        kwargs = {"data_path": SUBSET, "sandbox": sandbox, "protocol": protocol}
        toolhop, tooltasks = gym.make("ToolHop-v0", **kwargs), gym.make("ToolTasks-v0", **kwargs)
        tasks = toolhop.unwrapped.tasks
        assert [t.id for t in tooltasks.unwrapped.tasks] == [t.id for t in tasks]
        for index, task in enumerate(tasks[:24]):
            actions = replies(task, index)
            assert outcome(tooltasks, index, actions) == outcome(toolhop, index, actions), task.id
        toolhop.close()
        tooltasks.close()
