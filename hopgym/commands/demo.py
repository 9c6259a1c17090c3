"""``hopgym demo``: a scripted policy over the real ToolHop data through the real sandbox.

The policy never reads answers. Where a task ships literal example calls (``gold_calls``) it replays
them; otherwise it calls each offered tool once, filling required parameters from the schema (strings
get the previous tool result, or the question for the first call). It answers with the last result.
The summary has the paper's Table 4 columns for this policy.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import gymnasium as gym
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hopgym.envs.chat import chat_env
from hopgym.envs.metrics import INVOCATION_ERROR_TYPES, table4_metrics
from hopgym.messages import tool_call
from hopgym.tasks.model import Task


def placeholder(schema: dict[str, Any], text: str) -> Any:
    """A schema-valid value: enum's first value, the given text for strings, small defaults otherwise."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "string")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "array":
        item = placeholder(schema.get("items", {"type": "string"}), text)
        return [item] * max(1, schema.get("minItems", 1))
    if kind == "object":
        properties = schema.get("properties", {})
        return {
            name: placeholder(properties[name], text)
            for name in schema.get("required", [])
            if name in properties
        }
    if kind in ("integer", "number"):
        value = max(schema.get("minimum", 1), min(1, schema.get("maximum", 1)))
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return False
    return text[: schema["maxLength"]] if "maxLength" in schema else text


def scripted_calls(task: Task) -> list[tuple[str, dict[str, Any] | None]]:
    """(name, arguments) per turn; ``None`` arguments are filled from the previous result at call time."""
    if task.gold_calls:
        return [(call.name, call.arguments) for call in task.gold_calls]
    return [(tool["function"]["name"], None) for tool in task.tools]


def schema_arguments(tool: dict[str, Any], text: str) -> dict[str, Any]:
    parameters = tool["function"]["parameters"]
    properties = parameters.get("properties", {})
    return {
        name: placeholder(properties[name], text)
        for name in parameters.get("required", [])
        if name in properties
    }


def run_episode(env: gym.Env, index: int) -> dict[str, Any]:
    """One scripted episode; returns the record the metrics read (``correct``, ``calls``, ...)."""
    observation, info = env.reset(options={"index": index})
    task = chat_env(env).tasks[index]
    tools = {tool["function"]["name"]: tool for tool in observation["tools"]}
    last_result = task.question
    calls: list[dict[str, Any]] = []
    for turn, (name, arguments) in enumerate(scripted_calls(task)):
        if arguments is None:
            arguments = schema_arguments(tools[name], last_result)
        action = {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call(name, arguments, f"call_{turn}")],
        }
        observation, _, terminated, truncated, info = env.step(action)
        calls.extend(info["calls"])
        if info["calls"][0]["status"] == "ok":
            last_result = observation["messages"][-1]["content"]
        if terminated or truncated:
            return {
                "task_id": task.id,
                "correct": False,
                "reward": 0.0,
                "calls": calls,
                "truncated": truncated,
            }
    _, reward, _, _, info = env.step({"role": "assistant", "content": last_result})
    return {
        "task_id": task.id,
        "correct": info["correct"],
        "reward": reward,
        "calls": calls,
        "truncated": False,
    }


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}"


def summary_table(metrics: dict[str, Any], statuses: Counter[str], title: str) -> Table:
    table = Table(title=title)
    table.add_column("Metric")
    table.add_column("Query (%)", justify="right")
    table.add_column("Instance (%)", justify="right")
    table.add_row("Answer correctness", _percent(metrics["answer_correctness"]), "")
    table.add_row(
        "Invocation error",
        _percent(metrics["invocation_error_query"]),
        _percent(metrics["invocation_error_instance"]),
    )
    for error_type in INVOCATION_ERROR_TYPES:
        label = "  " + error_type.replace("_", " ")
        table.add_row(
            label, _percent(metrics[f"{error_type}_query"]), _percent(metrics[f"{error_type}_instance"])
        )
    table.caption = f"{metrics['episodes']} episodes, {metrics['calls']} calls; call statuses: " + ", ".join(
        f"{status} {count}" for status, count in sorted(statuses.items())
    )
    return table


def run(args: argparse.Namespace) -> int:
    console = Console()
    env = gym.make(
        "ToolHop-v0",
        data_path=args.data,
        scenario="mandatory",
        feedback=args.feedback,
        sandbox=args.sandbox,
    )
    try:
        count = len(chat_env(env).tasks) if args.limit is None else min(args.limit, len(chat_env(env).tasks))
        records = []
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            bar = progress.add_task("ToolHop episodes", total=count)
            for index in range(count):
                records.append(run_episode(env, index))
                progress.advance(bar)
        sandbox = chat_env(env).sandbox
        assert sandbox is not None  # ToolHopEnv makes its sandbox when made and drops it in close()
        isolation = sandbox.isolation
    finally:
        env.close()
    statuses = Counter(call["status"] for record in records for call in record["calls"])
    title = f"ToolHop-v0, scripted policy, mandatory scenario, {args.feedback} feedback ({isolation})"
    console.print(summary_table(table4_metrics(records), statuses, title))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="run a scripted policy over ToolHop in the sandbox and print a Table 4-style summary"
    )
    parser.add_argument(
        "--data", default=None, help="ToolHop JSON or JSONL (default: $HOPGYM_DATA, cache, download)"
    )
    parser.add_argument("--limit", type=int, default=None, help="run only the first N tasks")
    parser.add_argument("--feedback", choices=("detailed", "minimal"), default="detailed")
    parser.add_argument("--sandbox", default="process", help="sandbox backend (process or docker)")
    parser.set_defaults(func=run)
