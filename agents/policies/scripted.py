"""The scripted policy of ``hopgym demo``: ToolHop episodes without a model, through the real sandbox.

The policy never reads answers. Where a task ships literal example calls (``gold_calls``) it replays
them; otherwise it calls each offered tool once, filling required parameters from the schema (strings
get the previous tool result, or the question for the first call). It answers with the last result.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from hopgym.envs.chat import chat_env
from hopgym.messages import tool_call
from hopgym.tasks.toolhop.task import Task


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
