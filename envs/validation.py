"""Validating one tool call against the offered tools before it runs, and naming what is wrong.

Statuses are ordered as in DESIGN.md; a call's ``status`` is the first that applies and ``errors``
lists every one that applies: tool_hallucination, invalid_arguments (unparseable JSON),
parameter_hallucination, parameter_missing, invalid_arguments (wrong type or enum value).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

STATUS_ORDER = (
    "tool_hallucination",
    "invalid_arguments",
    "parameter_hallucination",
    "parameter_missing",
)
_STRUCTURAL_KEYWORDS = frozenset({"required", "additionalProperties"})


@dataclass(frozen=True)
class CallCheck:
    """The verdict on one call: ``arguments`` is the parsed dict, or the raw value when it did not parse."""

    arguments: Any
    errors: tuple[str, ...] = ()
    messages: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def status(self) -> str:
        return self.errors[0] if self.errors else "ok"


def parse_arguments(raw: Any, empty_is_object: bool = True) -> tuple[Any, str | None]:
    """Arguments as a dict, or the raw value and why it is not a JSON object.

    ``empty_is_object``: read a missing or empty argument string as ``{}`` (hopgym's protocol); the
    official ToolHop code parses it with ``json.loads``, for which it is not JSON."""
    if empty_is_object and (raw is None or raw == ""):
        return {}, None
    if isinstance(raw, Mapping):
        return dict(raw), None
    if not isinstance(raw, str):
        return raw, f"arguments must be a JSON object or a JSON string, got {type(raw).__name__}"
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        return raw, f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
    if not isinstance(parsed, dict):
        return raw, f"arguments must be a JSON object, got {type(parsed).__name__}"
    return parsed, None


class ToolValidator:
    """Checks calls against one task's offered tool schemas (validators are built once per task)."""

    def __init__(self, tools: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> None:
        self._schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in tools}
        self._validators: dict[str, Draft202012Validator] = {}

    def _validator(self, name: str) -> Draft202012Validator:
        if name not in self._validators:
            self._validators[name] = Draft202012Validator(self._schemas[name])
        return self._validators[name]

    def check(self, name: Any, raw_arguments: Any, empty_is_object: bool = True) -> CallCheck:
        arguments, parse_problem = parse_arguments(raw_arguments, empty_is_object)
        errors: list[str] = []
        messages: list[str] = []
        if name not in self._schemas:
            offered = ", ".join(self._schemas) or "none"
            errors.append("tool_hallucination")
            messages.append(f"tool {name!r} does not exist; available tools: {offered}")
        if parse_problem is not None:
            errors.append("invalid_arguments")
            messages.append(parse_problem)
        if errors:
            return CallCheck(arguments, tuple(errors), tuple(messages))

        schema = self._schemas[name]
        properties = schema.get("properties", {})
        # Parameters outside the document are hallucinated unless the schema explicitly allows extras.
        if schema.get("additionalProperties") in (None, False):
            unknown = [key for key in arguments if key not in properties]
            if unknown:
                errors.append("parameter_hallucination")
                messages.append(
                    f"unknown parameter(s) {', '.join(map(repr, unknown))} for {name}; "
                    f"valid parameters: {', '.join(properties)}"
                )
        missing = [key for key in schema.get("required", []) if key not in arguments]
        if missing:
            errors.append("parameter_missing")
            messages.append(f"missing required parameter(s) {', '.join(map(repr, missing))} for {name}")
        value_problems = [
            f"parameter {'.'.join(map(str, error.absolute_path)) or '(arguments)'}: {error.message}"
            for error in self._validator(name).iter_errors(arguments)
            if error.validator not in _STRUCTURAL_KEYWORDS or error.absolute_path
        ]
        if value_problems:
            errors.append("invalid_arguments")
            messages.extend(value_problems)
        return CallCheck(arguments, tuple(errors), tuple(messages))
