"""The construction pipeline end to end against a scripted model server (real HTTP on 127.0.0.1) and the
real sandbox: retries carry the failure, only verified rows enter the dataset, the dataset runs in
ToolHop-v0 and a scripted oracle solves it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import hopgym  # noqa: F401 - registers the envs
from hopgym.agents.construction.checks import check_execution, check_signature, parse_proposed_call
from hopgym.agents.construction.pipeline import report_path, rows_path
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply
from hopgym.cli import main
from hopgym.sandbox import make_sandbox
from hopgym.tasks.toolhop.construction_rows import read_query_rows
from tests.shared_data import SUBSET, needs_data

needs_subset = needs_data("toolhop/toolhop_subset100.jsonl")

# question -> (tool name, input parameter, input value, answer)
HOPS = {
    "Who wrote Dune?": ("book_author_lookup", "title", "Dune", "Frank Herbert"),
    "In which year was Frank Herbert born?": ("birth_year_lookup", "person", "Frank Herbert", "1920"),
    "What is 1920 plus 10?": ("add_ten", "number", 1920, "1930"),
    "Who directed Alien?": ("film_director_lookup", "film", "Alien", "Ridley Scott"),
    "Where was Ridley Scott born?": ("birthplace_lookup", "person", "Ridley Scott", "South Shields"),
    "What is the capital of Atlantis?": ("capital_lookup", "country", "Atlantis", "Poseidonia"),
}
ROWS = [
    {
        "id": "dune",
        "question": "What is the birth year of the author of Dune plus 10?",
        "answer": "1930",
        "sub_tasks": [[q, HOPS[q][3]] for q in list(HOPS)[:3]],
    },
    {
        "id": "alien",
        "question": "Where was the director of Alien born?",
        "answer": "South Shields",
        "sub_tasks": [[q, HOPS[q][3]] for q in list(HOPS)[3:5]],
    },
    {
        "id": "atlantis",
        "question": "What is the capital of Atlantis?",
        "answer": "Poseidonia",
        "sub_tasks": [["What is the capital of Atlantis?", "Poseidonia"]],
    },
]
BROKEN_FIRST = "birth_year_lookup"
"""Its first code attempt crashes on invalid input (KeyError) instead of returning an error."""
UNSOLVABLE = "capital_lookup"
"""Its code never returns the answer, so its row must stay out of the dataset."""
PROSE_FIRST = "film_director_lookup"
"""Its first creation reply is prose, not JSON."""


def document(name: str, parameter: str, value: Any, refined: bool) -> dict[str, Any]:
    kind = "integer" if isinstance(value, int) else "string"
    properties: dict[str, Any] = {parameter: {"type": kind, "description": f"The {parameter}."}}
    if refined:
        properties["output_format"] = {
            "type": "string",
            "enum": ["text", "json"],
            "description": "Output form.",
        }
    return {
        "name": name,
        "description": f"Looks up {name.replace('_', ' ')}." + (" Text or JSON output." if refined else ""),
        "parameters": {"type": "object", "properties": properties, "required": [parameter]},
    }


def code(name: str, parameter: str, value: Any, answer: str, broken: bool) -> str:
    result = (
        "'nothing'"
        if name == UNSOLVABLE
        else f"known[{parameter}]"
        if broken
        else f"known.get({parameter}, 'unknown')"
    )
    check = "isinstance({p}, int)" if isinstance(value, int) else "isinstance({p}, str) and {p}.strip()"
    guard = (
        ""
        if broken
        else f"""
    if not ({check.format(p=parameter)}):
        return {{'error': '{parameter} must be a valid, non-empty value'}}
    if output_format not in ('text', 'json'):
        return {{'error': "output_format must be 'text' or 'json'"}}"""
    )
    return f"""def {name}({parameter}, output_format='text'):
    # A simulated lookup table.
    known = {{{value!r}: {answer!r}}}{guard}
    result = {result}
    return result if output_format == 'text' else {{'result': result}}

# Example usage
print({name}({value!r}))
"""


def field(prompt: str, label: str) -> str:
    return re.search(rf"\*\*{label}\*\*:\s*(.*)", prompt).group(1).strip()


def constructing_model(request: dict[str, Any]) -> ScriptedReply:
    """Answers the three stage prompts from the HOPS table; some first attempts are broken on purpose."""
    prompt = request["messages"][0]["content"]
    retry = len(request["messages"]) > 1
    if prompt.startswith("Design one tool"):
        name, parameter, value, _ = HOPS[field(prompt, "Question")]
        if name == PROSE_FIRST and not retry:
            return ScriptedReply(content="I would design a film director lookup tool.")
        reply = {"analysis": "a lookup", "tool": document(name, parameter, value, refined=False)}
    elif prompt.startswith("Improve the tool document"):
        tool = json.loads(prompt.split("**Tool**:", 1)[1])
        _, parameter, value, _ = next(hop for hop in HOPS.values() if hop[0] == tool["name"])
        reply = {
            "analysis": "adds a format",
            "refined_version": document(tool["name"], parameter, value, refined=True),
        }
    else:
        question = field(prompt, "Question")
        name, parameter, value, answer = HOPS[question]
        broken = name == BROKEN_FIRST and not retry
        reply = {
            "analysis": "a table lookup",
            "function": code(name, parameter, value, answer, broken),
            "call": f"{name}({parameter}={value!r})",
        }
    return ScriptedReply(content="```json\n" + json.dumps(reply) + "\n```")


def construct_args(
    rows: list[dict[str, Any]], folder: Path, server: ScriptedModelServer, *extra: str
) -> list[str]:
    """``hopgym construct`` of ``rows`` (written to ``folder``) against ``server``, two attempts a stage,
    into ``folder/dataset.json``."""
    queries = folder / "queries.jsonl"
    queries.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return [
        "construct", "--input", str(queries), "--model", server.model, "--api-base", server.api_base,
        "--api-key", "sk", "--out", str(folder / "dataset.json"), "--max-attempts", "2", "--no-progress",
        *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def constructed(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("construct")
    out = folder / "dataset.json"
    with ScriptedModelServer(constructing_model) as server:
        code_ = main(construct_args(ROWS, folder, server))
        requests = server.requests
    assert code_ == 0
    return out, json.loads(report_path(out).read_text()), requests


def test_a_broken_first_code_attempt_is_retried_with_its_failure(constructed) -> None:
    _, report, requests = constructed
    retries = [
        r for r in requests if len(r["messages"]) == 3 and r["messages"][0]["content"].startswith("Write")
    ]
    broken = [r for r in retries if "birth_year_lookup" in r["messages"][0]["content"]]
    assert len(broken) == 1
    failure = broken[0]["messages"][2]["content"]
    assert failure.startswith("Your answer failed verification")
    assert "birth_year_lookup(person=''" in failure and "KeyError" in failure
    tools = {tool["name"]: tool for row in report["details"] for tool in row["tools"]}
    generation = tools[BROKEN_FIRST]["stages"][2]
    assert generation["passed"] and generation["attempts"] == 2 and len(generation["failures"]) == 1
    creation = tools[PROSE_FIRST]["stages"][0]
    assert creation["passed"] and creation["attempts"] == 2
    assert "not one JSON object" in creation["failures"][0][0]


def test_the_report_counts_every_stage_and_attempt(constructed) -> None:
    _, report, requests = constructed
    assert report["rows"] == 3 and report["rows_passed"] == 2 and report["tools_passed"] == 5
    stages = report["stages"]
    assert stages["creation"] == {
        "reached": 6,
        "passed": 6,
        "pass_rate": 1.0,
        "passed_at_attempt": {"1": 5, "2": 1},
    }
    assert stages["refinement"]["passed_at_attempt"] == {"1": 6}
    assert stages["generation"]["reached"] == 6 and stages["generation"]["passed"] == 5
    assert stages["generation"]["passed_at_attempt"] == {"1": 4, "2": 1}
    unsolvable = report["details"][2]["tools"][0]["stages"][2]
    assert not unsolvable["passed"] and unsolvable["attempts"] == 2
    assert "does not contain the answer 'Poseidonia'" in unsolvable["failures"][-1][0]
    # 6 creations + 1 retry, 6 refinements, 6 generations + 1 retry each for the broken and the unsolvable
    assert len(requests) == 21 and report["usage"]["requests"] == 21


def test_only_verified_rows_are_written_and_every_tool_passes_verification_again(constructed) -> None:
    out, _, _ = constructed
    dataset = json.loads(out.read_text())
    assert [row["id"] for row in dataset] == ["dune", "alien"]
    with make_sandbox("process") as sandbox:
        for row in dataset:
            assert set(row) >= {"question", "answer", "sub_task", "tools", "functions"}
            for (question, answer), source, call in zip(
                row["sub_task"].items(), row["functions"], row["gold_calls"], strict=True
            ):
                document_ = row["tools"][question]
                assert check_signature(source, document_) == []
                gold, failures = parse_proposed_call(call, source, document_)
                assert failures == []
                assert check_execution(sandbox, source, document_, gold, answer) == []


def test_the_dataset_runs_in_toolhop_and_an_oracle_solves_it(constructed) -> None:
    out, _, _ = constructed
    env = gym.make("ToolHop-v0", data_path=str(out))
    try:
        tasks = env.unwrapped.tasks
        assert [task.hops for task in tasks] == [3, 2]
        for index, task in enumerate(tasks):
            _, info = env.reset(options={"index": index})
            assert info["load_errors"] == []
            last = ""
            for turn, gold in enumerate(task.gold_calls):
                call = {
                    "id": f"c{turn}",
                    "type": "function",
                    "function": {"name": gold.name, "arguments": json.dumps(gold.arguments)},
                }
                observation, _, _, _, info = env.step(
                    {"role": "assistant", "content": "", "tool_calls": [call]}
                )
                assert info["calls"][0]["status"] == "ok"
                last = observation["messages"][-1]["content"]
            _, reward, terminated, _, info = env.step(f"The answer is {last}.")
            assert terminated and reward == 1.0 and info["correct"]
    finally:
        env.close()


@needs_subset
def test_hop_order_is_recovered_from_real_toolhop_rows() -> None:
    """The subset's sub_task keys are sorted; the functions' order gives the hops, ending at the answer."""
    rows = read_query_rows(SUBSET)
    assert len(rows) == 100
    assert [q for q, _ in rows[0].sub_tasks] == [
        "Who is the father of Raoul I Of Brienne, Count Of Eu?",
        "What is the date of death of John Ii Of Brienne, Count Of Eu?",
        "What is the sum of all the digits in the day, month and year of 11 July 1302?",
    ]
    assert sum(row.sub_tasks[-1][1].lower() == row.answer.lower() for row in rows) == 100


def marked(question: str, row_id: str) -> str:
    return f"{question} [row {row_id}]"


class RowGate:
    """:func:`constructing_model` for questions marked with their row (:func:`marked`) that lets through the
    requests of the first ``wave`` rows it hears of and holds every other row's until :attr:`opened` is set.
    construct works on ``--concurrency`` rows at once (in no set order), so with ``wave`` that number the
    rows heard of first each hold a place and finish: a run killed once some are done cannot have finished
    any other, however fast or slow the machine."""

    def __init__(self, wave: int) -> None:
        self.wave, self.admitted, self.opened = wave, set[str](), threading.Event()
        self._lock = threading.Lock()

    def model(self, request: dict[str, Any]) -> ScriptedReply:
        named = {row for m in request["messages"] for row in re.findall(r"\[row ([^\]]+)\]", m["content"])}
        with self._lock:
            for row in sorted(named - self.admitted)[: self.wave - len(self.admitted)]:
                self.admitted.add(row)
            held = not named <= self.admitted
        if held:
            self.opened.wait()
        messages = [
            {**message, "content": re.sub(r" \[row [^\]]+\]", "", message["content"])}
            for message in request["messages"]
        ]
        return constructing_model({**request, "messages": messages})


def test_construct_killed_mid_run_then_resumed_has_every_row_exactly_once(tmp_path: Path) -> None:
    rows = [
        {
            "id": f"{row['id']}-{copy}",
            "question": row["question"],
            "answer": row["answer"],
            "sub_tasks": [[marked(q, f"{row['id']}-{copy}"), a] for q, a in row["sub_tasks"]],
        }
        for copy in range(4)
        for row in ROWS
    ]
    out = tmp_path / "dataset.json"
    progress = rows_path(out)
    gate = RowGate(wave=3)  # construct's --concurrency below
    with ScriptedModelServer(gate.model) as server:
        arguments = construct_args(rows, tmp_path, server, "--concurrency", "3")
        command = [sys.executable, "-m", "hopgym.cli", *arguments]
        first = subprocess.Popen(command, start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while not (progress.exists() and len(progress.read_text().splitlines()) >= 2):
                assert first.poll() is None and time.monotonic() < deadline, "the first run did not progress"
                time.sleep(0.05)
        finally:  # killed whatever happened: its own session would outlive the test
            with contextlib.suppress(ProcessLookupError):
                os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=60)
            gate.opened.set()  # the killed run's held requests answer a dead client; the next runs go on
        before = progress.read_text()
        done_before = [json.loads(line)["id"] for line in before.splitlines()]
        assert len(done_before) >= 2 and set(done_before) <= gate.admitted
        assert not out.exists()  # the dataset is written only once every row is done
        seen = len(server.requests)
        again = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert again.returncode == 2 and "--resume" in again.stderr  # a finished row is never redone silently
        resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=300)
        later = server.requests[seen:]
    assert resumed.returncode == 0, resumed.stderr
    after = progress.read_text()
    assert after.startswith(before)
    ids = [json.loads(line)["id"] for line in after.splitlines()]
    assert sorted(ids) == sorted(row["id"] for row in rows)  # every row exactly once
    asked = {row_id for r in later for row_id in re.findall(r"\[row ([^\]]+)\]", r["messages"][0]["content"])}
    assert asked and not asked & set(done_before)  # the resumed run asked nothing for a finished row
    report = json.loads(report_path(out).read_text())
    assert report["rows"] == 12 and report["rows_passed"] == 8 and report["tools_passed"] == 20
    assert [row["id"] for row in report["details"]] == [row["id"] for row in rows]
    dataset = json.loads(out.read_text())
    assert [row["id"] for row in dataset] == [r["id"] for r in rows if not r["id"].startswith("atlantis")]


def test_rows_are_started_in_the_order_of_the_input(tmp_path: Path) -> None:
    """One row at a time, construct finishes them in the input's order: a run cut short has done the first
    rows, as a reader of the input expects (and --resume picks up from there)."""
    rows = [{**row, "id": f"{row['id']}-{copy}"} for copy in range(4) for row in ROWS]
    with ScriptedModelServer(constructing_model) as server:
        code_ = main(construct_args(rows, tmp_path, server, "--concurrency", "1"))
    assert code_ == 0
    done = [json.loads(line)["id"] for line in rows_path(tmp_path / "dataset.json").read_text().splitlines()]
    assert done == [row["id"] for row in rows]
