"""ToolHop tasks answered by a scripted model server, and the run folders the eval runner leaves of them:
the shared setup of the tests of eval, reports, serving and training that drive ``hopgym eval`` end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hopgym.agents.evaluation.runner import EvalConfig, EvalRun
from hopgym.agents.model.client import ModelConfig
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply, tool_call
from hopgym.tasks.toolhop.loader import load_toolhop

TASKS = load_toolhop()
TASK_BY_QUESTION = {task.question: task for task in TASKS}


def question_of(request: dict[str, Any]) -> str:
    """The task's question: the first user message is it (hopgym protocol) or ends with it (official)."""
    first = next(m["content"] for m in request["messages"] if m["role"] == "user")
    return next((question for question in TASK_BY_QUESTION if first.endswith(question)), first)


def solving_policy(correct_every: int = 2, delay: float = 0.0, fail_index: int | None = None):
    """Calls the task's first tool once, then answers: the gold answer for every ``correct_every``-th
    task (by index), a wrong one otherwise; HTTP 500 for every request of task ``fail_index``."""

    def policy(request: dict[str, Any]) -> ScriptedReply:
        task = TASK_BY_QUESTION[question_of(request)]
        index = TASKS.index(task)
        if index == fail_index:
            return ScriptedReply(status=500)
        if any(message["role"] == "tool" for message in request["messages"]):
            answer = task.answer if index % correct_every == 0 else "I do not know"
            return ScriptedReply(content=f"Final answer: {answer}", delay=delay)
        function = task.tools[0]["function"]
        arguments = {name: "x" for name in function["parameters"].get("required", [])}
        return ScriptedReply(tool_calls=(tool_call(function["name"], arguments),), delay=delay)

    return policy


def read_records(folder: Path) -> list[dict[str, Any]]:
    """The episode records of a run folder, in the order they were written."""
    return [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]


def run(server: ScriptedModelServer, out: Path, **overrides: Any) -> dict[str, Any]:
    """An eval run of the first 6 tasks against ``server`` into ``out`` (``overrides``: EvalConfig fields);
    its summary."""
    options = {"limit": 6, "concurrency": 3, "progress": False, **overrides}
    model = ModelConfig(
        server.model, api_base=server.api_base, api_key="sk", max_retries=1, backoff_base=0.01
    )
    return EvalRun(EvalConfig(out=out, model=model, **options)).run()


def seed_policy(cut_off_task: int | None = None):
    """Answers at once: the gold answer when the request's seed is even, a wrong one when it is odd;
    the reply for task ``cut_off_task`` comes back cut at its token cap (finish reason ``length``)."""

    def policy(request: dict[str, Any]) -> ScriptedReply:
        task = TASK_BY_QUESTION[question_of(request)]
        answer = task.answer if request.get("seed", 0) % 2 == 0 else "I do not know"
        cut = TASKS.index(task) == cut_off_task
        return ScriptedReply(content=f"Final answer: {answer}", finish_reason="length" if cut else None)

    return policy


def eval_args(server: ScriptedModelServer, out: Path, *extra: str) -> list[str]:
    """``hopgym eval`` against ``server``: the direct agent and scenario, 3 at once, into ``out``."""
    return [
        "eval",
        "--model",
        server.model,
        "--api-base",
        server.api_base,
        "--api-key",
        "sk",
        "--agent",
        "direct",
        "--scenario",
        "direct",
        "--concurrency",
        "3",
        "--no-progress",
        "--out",
        str(out),
        *extra,
    ]
