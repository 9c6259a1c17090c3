"""``hopgym rescore`` on real ToolHop runs (scripted model server, real sandbox): rescoring a saved run
with another scorer, or another protocol's answer rule, equals a fresh eval made that way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply, tool_call
from hopgym.cli import main
from tests.scripted_runs import TASK_BY_QUESTION, TASKS, question_of, read_records


def answering_policy(request: dict[str, Any]) -> ScriptedReply:
    """Calls the task's first tool, then answers: the gold answer (index % 3 == 0), the gold answer glued
    to a letter (the official substring rule accepts it, the normalized match does not), or nothing."""
    task = TASK_BY_QUESTION[question_of(request)]
    if not any(message["role"] == "tool" for message in request["messages"]):
        function = task.tools[0]["function"]
        arguments = {name: "x" for name in function["parameters"].get("required", [])}
        return ScriptedReply(tool_calls=(tool_call(function["name"], arguments),))
    answer = (task.answer, f"X{task.answer}", "I do not know")[TASKS.index(task) % 3]
    return ScriptedReply(content=f"Final answer: {answer}")


def evaluate(server: ScriptedModelServer, out: Path, *extra: str) -> None:
    args = ["eval", "--model", server.model, "--api-base", server.api_base, "--api-key", "sk",
            "--limit", "6", "--concurrency", "2", "--no-progress", "--out", str(out), *extra]  # fmt: skip
    assert main(args) == 0


def comparable(folder: Path) -> dict[str, Any]:
    """The summary without the run's description (folder, settings, provenance)."""
    summary = json.loads((folder / "summary.json").read_text())
    return {key: value for key, value in summary.items() if key != "run"}


def correct_by_task(folder: Path) -> dict[str, bool]:
    return {record["task_id"]: record["correct"] for record in read_records(folder)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rescore")
    with ScriptedModelServer(answering_policy) as server:
        evaluate(server, root / "official")
        evaluate(server, root / "normalized", "--env-arg", "scorer=normalized")
        evaluate(server, root / "hopgym", "--env-arg", "protocol=hopgym")
    return root


def test_rescoring_with_another_scorer_equals_a_fresh_eval(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "rescored"
    assert main(["rescore", str(runs / "official"), "--scorer", "normalized", "--out", str(out)]) == 0
    assert comparable(out) == comparable(runs / "normalized")
    assert correct_by_task(out) == correct_by_task(runs / "normalized")
    assert correct_by_task(out) != correct_by_task(runs / "official")  # the scorers disagree somewhere
    run = json.loads((out / "run.json").read_text())
    assert run["env_kwargs"]["scorer"] == "normalized"
    assert run["provenance"]["rescored"]["from"] == str(runs / "official")
    assert (
        run["provenance"]["data"]
        == json.loads((runs / "official" / "run.json").read_text())["provenance"]["data"]
    )


def test_rescoring_with_another_protocols_rule_equals_its_fresh_verdicts(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "rescored"
    assert main(["rescore", str(runs / "official"), "--protocol", "hopgym", "--out", str(out)]) == 0
    assert correct_by_task(out) == correct_by_task(runs / "hopgym")
    rescored, fresh = comparable(out), comparable(runs / "hopgym")
    for key in ("answer_correctness", "pass_at_k"):
        assert rescored[key] == fresh[key]
    assert rescored["intervals"]["answer_correctness"] == fresh["intervals"]["answer_correctness"]
    run = json.loads((out / "run.json").read_text())  # the protocol is the run's setting, not a record's
    assert run["env_kwargs"]["protocol"] == run["provenance"]["protocol"] == "hopgym"
    assert all("protocol" not in record for record in read_records(out))


def test_rescore_mistakes_are_one_line_and_write_nothing(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["rescore", str(runs / "official"), "--scorer", "fuzzy", "--out", str(tmp_path / "a")]) == 2
    assert "unknown scorer 'fuzzy'; valid: normalized, official" in capsys.readouterr().err
    assert main(["rescore", str(runs / "official"), "--protocol", "x", "--out", str(tmp_path / "b")]) == 2
    assert "unknown protocol 'x'; valid: official, hopgym" in capsys.readouterr().err
    assert main(["rescore", str(runs / "official"), "--out", str(runs / "hopgym")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
