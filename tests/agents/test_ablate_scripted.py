"""``hopgym ablate`` end to end on real ToolHop tasks and the real sandbox with a scripted model server
(real HTTP on 127.0.0.1) whose outcomes are fixed per task, so every table cell is computed by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hopgym.agents.evaluation.ablation import table5_markdown
from hopgym.agents.evaluation.stats import mean_interval
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply, tool_call
from hopgym.cli import main
from hopgym.envs.feedback import MINIMAL_HINT
from hopgym.envs.toolhop.prompts import SYSTEM_PROMPTS
from hopgym.tasks.toolhop.loader import load_toolhop

TASKS = load_toolhop()
INDEX_BY_QUESTION = {task.question: index for index, task in enumerate(TASKS)}
WRONG = "I do not know."  # no gold answer of tasks 0-4 is a substring of it (the official rule)

# Feedback: tasks 0-3 first call a tool that does not exist (tool hallucination, an invocation error);
# task 4 calls a real tool with unparseable JSON (invalid_arguments: a failed call, not an invocation
# error). Then each answers by the feedback it saw: (correct under detailed, correct under minimal).
FEEDBACK_OUTCOMES = {0: (True, False), 1: (True, False), 2: (False, True), 3: (True, True), 4: (True, False)}
# On tasks 0-3: w/ 3/4, w/o 2/4, C→I 2/4 (tasks 0, 1), I→C 1/4 (task 2). Task 4 is not counted.
TABLE5_ROW = "| 4 | 75.00 | 50.00 | 50.00 | 25.00 |"
# With every failed call counting (error set "failed"), task 4 joins: w/ 4/5, w/o 2/5, C→I 3/5, I→C 1/5.
TABLE5_FAILED_ROW = "| 5 | 80.00 | 40.00 | 60.00 | 20.00 |"

FRAMEWORK_CORRECT = {"fc": {0, 1}, "react": {0}, "codeact": {0, 1, 2}}
TABLE11_ROW = "| 66.67 | 33.33 | 100.00 |"
SCENARIO_CORRECT = {"direct": {0}, "mandatory": {0, 1}, "free": {0, 1, 2}}


def _request_task(request: dict[str, Any]) -> int:
    question = next(m["content"] for m in request["messages"] if m["role"] == "user")
    return INDEX_BY_QUESTION[question]


def answer(index: int, correct: bool) -> str:
    return f"Final answer: {TASKS[index].answer}" if correct else WRONG


def feedback_policy(request: dict[str, Any]) -> ScriptedReply:
    index = _request_task(request)
    tool_messages = [m for m in request["messages"] if m["role"] == "tool"]
    if not tool_messages:
        if index == 4:
            return ScriptedReply(tool_calls=(tool_call(TASKS[4].tool_names[0], "{not json"),))
        return ScriptedReply(tool_calls=(tool_call("no_such_tool", {}),))
    minimal = tool_messages[-1]["content"] == MINIMAL_HINT
    with_feedback, without_feedback = FEEDBACK_OUTCOMES[index]
    return ScriptedReply(content=answer(index, without_feedback if minimal else with_feedback))


def framework_policy(request: dict[str, Any]) -> ScriptedReply:
    index = _request_task(request)
    system = request["messages"][0]["content"]
    if "tools" in request:
        return ScriptedReply(content=answer(index, index in FRAMEWORK_CORRECT["fc"]))
    if "Final Answer:" in system:
        text = TASKS[index].answer if index in FRAMEWORK_CORRECT["react"] else WRONG
        return ScriptedReply(content=f"Thought: done\nFinal Answer: {text}")
    assert "Python" in system, "expected the CodeAct prompt"
    return ScriptedReply(content=answer(index, index in FRAMEWORK_CORRECT["codeact"]))


def scenario_policy(request: dict[str, Any]) -> ScriptedReply:
    index = _request_task(request)
    system = request["messages"][0]["content"]
    scenario = next(name for name, prompt in SYSTEM_PROMPTS.items() if system.startswith(prompt))
    return ScriptedReply(content=answer(index, index in SCENARIO_CORRECT[scenario]))


POLICIES = {
    "feedback": (feedback_policy, 5),
    "frameworks": (framework_policy, 3),
    "scenarios": (scenario_policy, 3),
}


def run_ablation(name: str, out: Path, *extra: str) -> list[dict[str, Any]]:
    """Run ``hopgym ablate NAME`` against the scripted server; return the requests it received."""
    policy, limit = POLICIES[name]
    with ScriptedModelServer(policy) as server:
        code = main([
            "ablate", name, "--model", server.model, "--api-base", server.api_base, "--api-key", "sk",
            "--limit", str(limit), "--concurrency", "2", "--out", str(out), "--no-progress",
            "--env-arg", "protocol=hopgym", *extra,
        ])  # fmt: skip
        assert code == 0
        return server.requests


@pytest.fixture(scope="module")
def ablation_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ablations")
    for name in POLICIES:
        run_ablation(name, root / name)
    return root


def records(folder: Path) -> dict[int, dict[str, Any]]:
    lines = (folder / "episodes.jsonl").read_text().splitlines()
    return {record["index"]: record for record in map(json.loads, lines)}


def correctness_cell(outcomes: list[bool]) -> str:
    """A table cell of answer correctness: percent ± the 95% interval's half-width, by reference."""
    interval = mean_interval([float(o) for o in outcomes])
    return f"{100 * interval['mean']:.2f} ± {100 * interval['half_width']:.2f}"


def test_feedback_ablation_runs_both_modes_and_its_table5_matches_the_hand_computed_row(
    ablation_runs: Path,
) -> None:
    out = ablation_runs / "feedback"
    for mode, position in (("detailed", 0), ("minimal", 1)):
        run = json.loads((out / mode / "run.json").read_text())
        assert run["env_kwargs"] == {"scenario": "mandatory", "feedback": mode, "protocol": "hopgym"}
        by_index = records(out / mode)
        assert {i: r["correct"] for i, r in by_index.items()} == {
            i: o[position] for i, o in FEEDBACK_OUTCOMES.items()
        }
        assert all(by_index[i]["calls"][0]["status"] == "tool_hallucination" for i in range(4))
        assert by_index[4]["calls"][0]["status"] == "invalid_arguments"
    table = (out / "ablation.md").read_text()
    assert TABLE5_ROW in table
    cells = [correctness_cell([o[position] for o in FEEDBACK_OUTCOMES.values()]) for position in (0, 1)]
    assert cells[0].startswith("80.00 ± ") and cells[1].startswith("40.00 ± ")
    assert f"| Answer correctness | {cells[0]} | {cells[1]} |" in table  # Table 4 columns, all five tasks
    assert TABLE5_FAILED_ROW in table5_markdown(out / "detailed", out / "minimal", error_set="failed")


def test_frameworks_ablation_writes_table11(ablation_runs: Path) -> None:
    out = ablation_runs / "frameworks"
    for agent, correct in FRAMEWORK_CORRECT.items():
        run = json.loads((out / agent / "run.json").read_text())
        assert run["agent"] == agent and run["env_kwargs"] == {"scenario": "free", "protocol": "hopgym"}
        assert {i for i, r in records(out / agent).items() if r["correct"]} == correct
    table = (out / "ablation.md").read_text()
    assert "| FC | react | codeact |" in table and TABLE11_ROW in table


def test_scenarios_ablation_puts_the_three_scenarios_side_by_side(ablation_runs: Path) -> None:
    table = (ablation_runs / "scenarios" / "ablation.md").read_text()
    assert "| Metric | direct | mandatory | free |" in table
    cells = [correctness_cell([i in SCENARIO_CORRECT[s] for i in range(3)]) for s in SCENARIO_CORRECT]
    assert [cell.split(" ±")[0] for cell in cells] == ["33.33", "66.67", "100.00"]
    assert f"| Answer correctness | {' | '.join(cells)} |" in table
    direct = records(ablation_runs / "scenarios" / "direct")
    assert all(record["calls"] == [] for record in direct.values())


def test_an_ablation_takes_evals_task_choice_and_samples_and_pairs_samples_for_table5(tmp_path: Path) -> None:
    """``--task``, ``--samples`` and ``--model-seed`` reach every arm, and Table 5 pairs each sample with its
    like: under minimal feedback the scripted model is right on even seeds only (sample 0), so a pairing by
    task alone would give 0 % or 100 % without feedback, not 50 % (one episode at a time, so which sample
    such a pairing would keep does not depend on timing)."""

    def policy(request: dict[str, Any]) -> ScriptedReply:
        tool_messages = [m for m in request["messages"] if m["role"] == "tool"]
        if not tool_messages:
            return ScriptedReply(tool_calls=(tool_call("no_such_tool", {}),))
        minimal = tool_messages[-1]["content"] == MINIMAL_HINT
        return ScriptedReply(content=answer(_request_task(request), not minimal or request["seed"] % 2 == 0))

    chosen = [TASKS[1].id, TASKS[0].id]
    out = tmp_path / "feedback"
    with ScriptedModelServer(policy) as server:
        code = main([
            "ablate", "feedback", "--model", server.model, "--api-base", server.api_base, "--api-key", "sk",
            "--task", chosen[0], "--task", chosen[1], "--samples", "2", "--model-seed", "10",
            "--concurrency", "1", "--out", str(out), "--no-progress", "--env-arg", "protocol=hopgym",
        ])  # fmt: skip
    assert code == 0
    for arm in ("detailed", "minimal"):
        lines = (out / arm / "episodes.jsonl").read_text().splitlines()
        runs = sorted((record["task_id"], record["sample"]) for record in map(json.loads, lines))
        assert runs == sorted((task_id, sample) for task_id in chosen for sample in (0, 1))
    assert "| 4 | 100.00 | 50.00 | 50.00 | 0.00 |" in (out / "ablation.md").read_text()


def test_an_ablation_refuses_the_setting_it_varies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, flag, value in (("feedback", "--feedback", "minimal"), ("frameworks", "--agent", "react")):
        code = main(["ablate", name, "--model", "openai/x", flag, value, "--out", str(tmp_path)])
        assert code == 2 and f"varies {flag}" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_an_ablation_whose_every_episode_failed_exits_1_after_writing_its_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As ``hopgym eval`` does for one run: no episode reached the model, so the exit status is 1 and the
    cause is on the last lines, one per arm; the tables are written all the same."""
    code = main([
        "ablate", "feedback", "--model", "openai/none", "--api-base", "http://127.0.0.1:9/v1",
        "--api-key", "sk", "--limit", "1", "--max-retries", "0", "--out", str(tmp_path / "down"),
        "--no-progress",
    ])  # fmt: skip
    assert code == 1
    lines = capsys.readouterr().err.strip().splitlines()[-2:]
    assert [line.split(":")[1].strip() for line in lines] == ["detailed", "minimal"]
    assert all("no episode reached the model" in line for line in lines)
    assert (tmp_path / "down" / "ablation.md").is_file()
