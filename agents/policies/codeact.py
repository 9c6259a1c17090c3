"""The CodeAct agent: the model writes Python that calls the tools as functions.

Action shape (agreed with the env): ``{"role": "assistant", "content": <the reply text>, "code": <the
Python of its fenced blocks>}``. The env runs ``code`` in the sandbox with the task's tools bound as
functions, validates and records every tool call made from it like a native call, and answers with a
``user`` message holding the printed output, the last expression's value or the exception. A reply
without code is the final answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from hopgym.agents.policies.base import Action, Agent, Observation, with_system_prompt
from hopgym.agents.policies.text_calls import extract_code
from hopgym.prompts import load_prompts


class CodeActPrompts(TypedDict):
    system: str


PROMPT = load_prompts("hopgym.agents.prompts", "codeact.yaml", CodeActPrompts, {"system": ["signatures"]})[
    "system"
]

_JSON_TO_PYTHON = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}
_JSON_TO_PYTHON |= {"array": "list", "object": "dict"}


def _annotation(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type", "")
    if isinstance(kind, list):
        return " | ".join(_JSON_TO_PYTHON.get(k, "Any") for k in kind)
    return _JSON_TO_PYTHON.get(kind, "Any")


def python_signatures(tools: Sequence[Mapping[str, Any]]) -> str:
    """The tools as Python stubs (signature and docstring with each parameter's description)."""
    stubs = []
    for tool in tools:
        function = tool["function"]
        parameters = function.get("parameters", {})
        properties = parameters.get("properties", {})
        required = set(parameters.get("required", ()))
        ordered = sorted(properties, key=lambda name: name not in required)
        arguments = ", ".join(
            f"{name}: {_annotation(properties[name])}" + ("" if name in required else " = None")
            for name in ordered
        )
        lines = [function.get("description", "").strip()]
        lines += [
            f"{name}: {properties[name].get('description', '')}".strip()
            + (f" (one of {json.dumps(properties[name]['enum'])})" if "enum" in properties[name] else "")
            for name in ordered
        ]
        doc = "\n    ".join(line for line in lines if line)
        stubs.append(f'def {function["name"]}({arguments}):\n    """{doc}"""')
    return "\n\n".join(stubs)


class CodeActAgent(Agent):
    """Code as the action; the tools are the functions the code may call."""

    name = "codeact"

    async def act(self, observation: Observation, info: Mapping[str, Any]) -> Action:
        tools = observation["tools"]
        messages = observation["messages"]
        if tools:
            messages = with_system_prompt(messages, PROMPT.format(signatures=python_signatures(tools)))
        reply = await self.complete(messages, sampling=info.get("sampling"))
        text = reply.message["content"]
        code = extract_code(text) if tools else None
        if code is None:
            return text
        return {"role": "assistant", "content": text, "code": code}
