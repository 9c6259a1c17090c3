"""The fast acceptor of tool arguments never says yes where jsonschema finds an error, and a call's verdict
and messages are the same with it as without it: on every real ToolHop schema and on crafted edge cases."""

from __future__ import annotations

import json
from typing import Any

import pytest
from shared_data import SUBSET, needs_data

from hopgym.agents.model.scripted_server import placeholder_arguments
from hopgym.envs.validation import ToolValidator
from hopgym.tasks.kg2tool.generated_tools import generate_kg_tools
from hopgym.tasks.schema_accept import MAX_ALTERNATIVES, acceptor
from hopgym.tasks.tool_schema import SafeValidator, argument_validator
from hopgym.tasks.toolhop.loader import load_toolhop

APPLIED = frozenset(SafeValidator.VALIDATORS)
ENTITY_OR_LIST = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
ODD_VALUES: list[Any] = [
    None,
    True,
    -1,
    3.0,
    float("nan"),
    "",
    "x",
    [],
    [1],
    ["a"] * 40,
    {"a": 1},
    [{"a": "x"}],
]


def variants(schema: dict[str, Any]) -> list[Any]:
    """Valid placeholder arguments, and each property given each odd value, one extra key, one missing."""
    valid = placeholder_arguments(schema)
    out: list[Any] = [valid, {}, {**valid, "unknown": 1}, [], "text"]
    for name, subschema in (schema.get("properties") or {}).items():
        values = [*ODD_VALUES, *(subschema.get("enum") or [])[:2]]
        out += [{**valid, name: value} for value in values]
        out.append({key: value for key, value in valid.items() if key != name})
    return out


def verdicts(validator: ToolValidator, name: str, arguments: Any) -> tuple[Any, ...]:
    check = validator.check(name, json.dumps(arguments), empty_is_object=False)
    return check.errors, check.messages


@needs_data("toolhop/toolhop_subset100.jsonl")
def test_real_schemas_agree_with_jsonschema_and_keep_every_message() -> None:
    """Over every tool of the 100-query subset: where the acceptor says yes, jsonschema finds no error;
    ToolValidator's errors and messages are the same as with the acceptor switched off; and the acceptor
    covers the schemas (it is what makes a valid call cheap)."""
    tasks = load_toolhop(SUBSET)
    covered = accepted = 0
    for task in tasks:
        fast, slow = ToolValidator(task.tools), ToolValidator(task.tools)
        for tool in task.tools:
            name, schema = tool["function"]["name"], tool["function"]["parameters"]
            full = argument_validator(schema)
            slow._validators[name] = type(full)(full.validator, None)
            covered += full.accepts is not None
            for arguments in variants(schema):
                if full.accepts is not None and full.accepts(arguments):
                    accepted += 1
                    assert not list(full.validator.iter_errors(arguments)), (name, arguments)
                assert verdicts(fast, name, arguments) == verdicts(slow, name, arguments), (name, arguments)
    tools = sum(len(task.tools) for task in tasks)
    assert covered >= 0.95 * tools and accepted > tools


def test_generated_kg_tool_schemas_agree_with_jsonschema_and_keep_every_message() -> None:
    """The KG tools' entity-or-list and set-list parameters (an ``anyOf``, long arrays on every call of a
    KGTool-v0 episode) are covered, never accepted where jsonschema finds an error, and judged alike."""
    tools = [tool.openai_schema() for tool in generate_kg_tools(["born_in", "parent"], "kg2tool")]
    fast, slow = ToolValidator(tools), ToolValidator(tools)
    for tool in tools:
        name, schema = tool["function"]["name"], tool["function"]["parameters"]
        full = argument_validator(schema)
        assert full.accepts is not None, name
        slow._validators[name] = type(full)(full.validator, None)
        for arguments in [*variants(schema), *({key: [["a", "b"], "c"]} for key in schema["properties"])]:
            if full.accepts(arguments):
                assert not list(full.validator.iter_errors(arguments)), (name, arguments)
            assert verdicts(fast, name, arguments) == verdicts(slow, name, arguments), (name, arguments)


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "integer"}, True),
        ({"type": "number"}, False),
        ({"type": ["string", "null"]}, 1),
        ({"enum": ["a", "b"]}, "c"),
        ({"enum": ["1"]}, 1),
        ({"type": "object", "required": ["a"]}, {"b": 1}),
        ({"properties": {"a": {"type": "string"}}}, {"a": 1}),
        ({"properties": {"a": {"minLength": 2}}}, {"a": "x"}),
        ({"maxLength": 1}, "xy"),
        ({"minItems": 1}, []),
        ({"maxItems": 1}, [1, 2]),
        ({"minimum": 0}, -1),
        ({"maximum": 0}, 0.5),
        ({"items": {"type": "string"}}, ["a", 1]),
        ({"properties": {"a": {}}, "additionalProperties": False}, {"a": 1, "b": 2}),
        ({"additionalProperties": {"type": "string"}}, {"b": 2}),
        (ENTITY_OR_LIST, ["a", 1]),
        (ENTITY_OR_LIST, 1),
        ({"anyOf": [{"type": "integer"}, {"minimum": 2}]}, 1.5),
        ({"properties": {"a": ENTITY_OR_LIST}}, {"a": [["b"]]}),
    ],
)
def test_never_accepts_what_jsonschema_rejects(schema: dict[str, Any], value: Any) -> None:
    accepts = acceptor(schema, APPLIED)
    assert accepts is not None and not accepts(value)
    assert list(SafeValidator(schema).iter_errors(value))


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/a", "$defs": {"a": {}}},
        {"anyOf": []},
        {"anyOf": {"type": "string"}},
        {"anyOf": [{"type": "string"}, {"anyOf": [{"type": "integer"}, {"type": "null"}]}]},
        {"anyOf": [{"items": {"anyOf": [{"type": "string"}]}}]},
        {"anyOf": [{"type": "string"}] * (MAX_ALTERNATIVES + 1)},
        {"allOf": [{"type": "string"}]},
        {"pattern": "a"},
        {"type": "strin"},
        {"enum": [1, 2]},
        {"required": "a"},
        {"minimum": True},
        {"items": [{"type": "string"}]},
        {"properties": {"a": {"const": 1}}},
        {"patternProperties": {"a": {}}, "additionalProperties": False},
        {"properties": {"a": {"$schema": "http://json-schema.org/draft-03/schema#", "disallow": "string"}}},
        False,
    ],
)
def test_a_schema_outside_the_subset_has_no_acceptor(schema: Any) -> None:
    """References, combinators, patterns, malformed keyword values: jsonschema alone judges (and names a
    malformed keyword in its own message)."""
    assert acceptor(schema, APPLIED) is None


def test_annotations_and_unknown_keywords_are_ignored_as_jsonschema_ignores_them() -> None:
    schema = {"type": "string", "description": "d", "default": 1, "format": "date", "optional": True}
    accepts = acceptor(schema, APPLIED)
    assert accepts is not None and accepts("not a date") and not accepts(1)
