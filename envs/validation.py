"""Validating one tool call against the offered tools before it runs, and naming what is wrong.

Statuses are ordered as in docs/contracts.md; a call's ``status`` is the first that applies and ``errors``
lists every one that applies: tool_hallucination, invalid_arguments (unparseable JSON),
parameter_hallucination, parameter_missing, invalid_arguments (wrong type or enum value).

Names and arguments come from the agent and are hostile input: a name that is not a string is a
hallucinated tool, and arguments must be at most :data:`MAX_ARGUMENT_BYTES` of valid UTF-8 JSON (no lone
surrogates, no integers past Python's 4300-digit limit, no nesting past the recursion limit); anything else
is ``invalid_arguments`` with the reason, never an exception. Schemas are applied by
:mod:`hopgym.tasks.tool_schema` (no remote ``$ref``, RE2 patterns, a time budget).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hopgym.envs.calls import CallStatus
from hopgym.tasks.tool_schema import (
    ArgumentCheckError,
    ArgumentValidator,
    argument_errors,
    argument_validator,
    check_tool_schema,
)

STATUS_ORDER: tuple[CallStatus, ...] = (
    "tool_hallucination",
    "invalid_arguments",
    "parameter_hallucination",
    "parameter_missing",
)
_STRUCTURAL_KEYWORDS = frozenset({"required", "additionalProperties"})
MAX_ARGUMENT_BYTES = 256 * 1024
"""Longest arguments accepted, as UTF-8 JSON text; the host parses nothing longer."""
MAX_VALUE_ERRORS = 10
"""Schema violations reported per call (a huge array can violate a schema millions of times)."""
MESSAGE_CHARS = 500
"""Characters kept of one validation message (messages quote the offending value)."""
_ENCODER = json.JSONEncoder(ensure_ascii=False)
"""``json.dumps(value, ensure_ascii=False)`` without making an encoder at every call."""


@dataclass(frozen=True)
class CallCheck:
    """The verdict on one call: ``arguments`` is the parsed dict, or the raw value when it did not parse."""

    arguments: Any
    errors: tuple[CallStatus, ...] = ()
    messages: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def status(self) -> CallStatus:
        return self.errors[0] if self.errors else "ok"


def parse_arguments(raw: Any, empty_is_object: bool = True) -> tuple[Any, str | None]:
    """Arguments as a plain JSON dict, or the raw value (a short stand-in when it cannot be kept as it is)
    and why it is not a usable JSON object.

    ``empty_is_object``: read a missing or empty argument string as ``{}`` (hopgym's protocol); the
    official ToolHop code parses it with ``json.loads``, for which it is not JSON."""
    if empty_is_object and (raw is None or (isinstance(raw, str) and raw == "")):
        return {}, None
    if isinstance(raw, Mapping):
        return _json_round_trip(raw)
    if not isinstance(raw, str):
        return stand_in(raw), f"arguments must be a JSON object or a JSON string, got {type(raw).__name__}"
    if len(raw) > MAX_ARGUMENT_BYTES:
        return stand_in(
            raw
        ), f"arguments are {len(raw)} characters long; at most {MAX_ARGUMENT_BYTES} are accepted"
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        return raw, f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
    except (ValueError, RecursionError) as exc:  # integers past the digit limit, nesting past the stack
        return stand_in(raw), f"arguments cannot be parsed ({type(exc).__name__}: {str(exc)[:200]})"
    if not isinstance(parsed, dict):
        return raw, f"arguments must be a JSON object, got {type(parsed).__name__}"
    return _json_round_trip(parsed, raw)


def _json_round_trip(arguments: Mapping[str, Any], raw: Any = None) -> tuple[Any, str | None]:
    """``arguments`` rebuilt from its UTF-8 JSON text, so that what runs, what is recorded and what a log
    writes later are plain JSON values; a mapping that has no such text is refused with the reason.
    Arguments parsed from ``raw`` JSON text are plain JSON values already: only checked, not rebuilt."""
    kept = stand_in(arguments) if raw is None else raw
    try:
        text = _ENCODER.encode(arguments)
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return stand_in(kept), "arguments are not valid Unicode (they hold a lone surrogate)"
    except (TypeError, ValueError, RecursionError) as exc:
        return kept, f"arguments are not JSON values ({type(exc).__name__}: {str(exc)[:200]})"
    if size > MAX_ARGUMENT_BYTES:
        return stand_in(
            kept
        ), f"arguments are {size} bytes of JSON; at most {MAX_ARGUMENT_BYTES} are accepted"
    return (json.loads(text) if raw is None else arguments), None


def _capped(message: str) -> str:
    if len(message) <= MESSAGE_CHARS:
        return message
    return f"{message[:MESSAGE_CHARS]}... ({len(message)} characters)"


def stand_in(value: Any) -> str:
    """A short text naming ``value``, for a record that cannot hold the value itself."""
    try:
        text = repr(value)
    except Exception:  # a big integer, a deep nest or a hostile __repr__
        text = f"<{type(value).__name__}>"
    return _capped(text)


class ToolValidator:
    """Checks calls against one task's offered tool schemas (validators are built once per task)."""

    def __init__(self, tools: Sequence[Mapping[str, Any]]) -> None:
        """Raises DataError for a schema the host cannot apply safely (see ``check_tool_schema``)."""
        self._schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in tools}
        for name, schema in self._schemas.items():
            check_tool_schema(schema, f"tool {name!r}")
        self._validators: dict[str, ArgumentValidator] = {}

    def _validator(self, name: str) -> ArgumentValidator:
        if name not in self._validators:
            self._validators[name] = argument_validator(self._schemas[name])
        return self._validators[name]

    def check(self, name: Any, raw_arguments: Any, empty_is_object: bool = True) -> CallCheck:
        arguments, parse_problem = parse_arguments(raw_arguments, empty_is_object)
        errors: list[CallStatus] = []
        messages: list[str] = []
        if not isinstance(name, str):
            errors.append("tool_hallucination")
            messages.append(f"the tool name must be a string, got {type(name).__name__}")
        elif name not in self._schemas:
            offered = ", ".join(self._schemas) or "none"
            errors.append("tool_hallucination")
            messages.append(f"tool {stand_in(name)} does not exist; available tools: {offered}")
        if parse_problem is not None:
            errors.append("invalid_arguments")
            messages.append(parse_problem)
        if errors:
            return CallCheck(arguments, tuple(errors), tuple(map(_capped, messages)))

        schema = self._schemas[name]
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        # Parameters outside the document are hallucinated unless the schema explicitly allows extras.
        if schema.get("additionalProperties") in (None, False):
            unknown = [key for key in arguments if key not in properties]
            if unknown:
                errors.append("parameter_hallucination")
                messages.append(
                    f"unknown parameter(s) {', '.join(map(repr, unknown))} for {name}; "
                    f"valid parameters: {', '.join(properties)}"
                )
        missing = [key for key in required if isinstance(key, str) and key not in arguments]
        if missing:
            errors.append("parameter_missing")
            messages.append(f"missing required parameter(s) {', '.join(map(repr, missing))} for {name}")
        value_problems = self._value_problems(name, arguments)
        if value_problems:
            errors.append("invalid_arguments")
            messages.extend(value_problems)
        return CallCheck(arguments, tuple(errors), tuple(map(_capped, messages)))

    def _value_problems(self, name: str, arguments: dict[str, Any]) -> list[str]:
        """What is wrong with the argument values (types, enums, patterns ...)."""
        try:
            found = argument_errors(self._validator(name), arguments, MAX_VALUE_ERRORS)
        except ArgumentCheckError as exc:
            return [f"the arguments could not be checked against the schema of {name}: {exc}"]
        problems = [
            f"parameter {'.'.join(map(str, error.absolute_path)) or '(arguments)'}: {error.message}"
            for error in found
            if error.validator not in _STRUCTURAL_KEYWORDS or error.absolute_path
        ]
        return problems
