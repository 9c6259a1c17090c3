"""The checks of query-driven tool construction: each returns the failures it found (empty = passed).

A failure is a sentence the model can act on, since it is sent back to the model on a retry. Documents
are checked for shape and (after refinement) backward compatibility; code is checked statically (it
compiles, defines the tool, its signature matches the document) and then by execution in the sandbox:
the proposed call returns the sub-answer, and invalid calls derived from it return error values.
"""

from __future__ import annotations

import ast
import html
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator, SchemaError

from hopgym.envs.feedback import is_error_value, render_value
from hopgym.envs.toolhop.scoring import normalized_match
from hopgym.envs.validation import ToolValidator
from hopgym.errors import DataError, error_text
from hopgym.model_text import SPACE as S
from hopgym.model_text import linear, outermost_braces, parsed_text, valid_unicode
from hopgym.sandbox.base import CallResult, Sandbox
from hopgym.tasks.tool_source import read_tool_source
from hopgym.tasks.toolhop.gold_calls import parse_gold_call
from hopgym.tasks.toolhop.task import GoldCall

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# RE2 (linear time): Python's re took quadratic time on a fence and a long run of spaces (20 KB: ~9 s).
_FENCE = linear(rf"```(?:json)?{S}*((?s:.*?))```")
_BAD_VALUE_BY_TYPE = {
    "integer": "not a number",
    "number": "not a number",
    "boolean": "not a boolean",
    "array": "not a list",
    "object": "not an object",
}
MAX_INVALID_CALLS = 3
_SHOWN_CHARS = 300


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "…"


def _json_candidates(text: str) -> list[str]:
    candidates = [text.strip(), *(match.strip() for match in _FENCE.findall(text))]
    braced = outermost_braces(text)
    return candidates if braced is None else [*candidates, braced]


def parse_json_reply(text: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The JSON object of a reply (bare, in a ```json fence, or the outermost ``{...}`` span).

    llama.cpp's ``chatml-function-calling`` template HTML-escapes the prompt, and small models echo
    the entities (``&#34;`` for ``"``), so an unescaped reading is tried after the literal one. Only the
    first :data:`~hopgym.model_text.MAX_PARSED_CHARS` characters of ``text`` are read.
    """
    text = parsed_text(text)
    unescaped = html.unescape(text)
    candidates = _json_candidates(text) + (_json_candidates(unescaped) if unescaped != text else [])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):  # not JSON; an integer past the digit limit; deep nesting
            continue
        if isinstance(value, dict):
            return valid_unicode(value), []  # its escapes may spell lone surrogates: see model_text
    return None, [f"the reply is not one JSON object; it began: {_shown(text.strip()[:120])!r}"]


def _types(schema: Mapping[str, Any]) -> set[str] | None:
    """The JSON types a property schema allows; ``None`` when it does not restrict the type."""
    kind = schema.get("type")
    if kind is None:
        return None
    return {kind} if isinstance(kind, str) else set(kind)


def check_document(document: Any, taken_names: Sequence[str] = ()) -> list[str]:
    """A tool document: a name (Python identifier, unused in this row), a description and an object
    schema with at least one property, valid JSON Schema, whose ``required`` names are properties."""
    if not isinstance(document, Mapping):
        return [f"the tool document must be a JSON object, got {_shown(document)}"]
    failures = []
    name = document.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        failures.append(f"the tool name {name!r} is not a Python identifier of at most 64 characters")
    elif name in taken_names:
        failures.append(f"the tool name {name!r} is already used by another tool of this query; pick another")
    if not isinstance(document.get("description"), str) or not document["description"].strip():
        failures.append("the tool needs a non-empty string 'description'")
    parameters = document.get("parameters")
    if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
        return [*failures, '\'parameters\' must be an object schema with "type": "object"']
    properties = parameters.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return [*failures, "'parameters' needs a non-empty 'properties' object"]
    not_schemas = [key for key, value in properties.items() if not isinstance(value, Mapping)]
    if not_schemas:
        failures.append(f"properties {not_schemas} must each be a JSON schema object")
    required = parameters.get("required", [])
    if not isinstance(required, list) or not all(isinstance(item, str) for item in required):
        failures.append("'required' must be a list of parameter names")
    else:
        unknown = [item for item in required if item not in properties]
        if unknown:
            failures.append(f"'required' names {unknown}, which are not in 'properties'")
    try:
        Draft202012Validator.check_schema(parameters)
    except SchemaError as exc:
        failures.append(f"'parameters' is not a valid JSON schema: {exc.message}")
    return failures


def check_backward_compatible(original: Mapping[str, Any], refined: Mapping[str, Any]) -> list[str]:
    """Every call valid for the original stays valid: same name, every original parameter kept with
    the types (and enum values) it allowed, no parameter required that the original did not require."""
    failures = []
    if refined.get("name") != original.get("name"):
        failures.append(f"the refined tool must keep the name {original.get('name')!r}")
    old = original["parameters"]["properties"]
    new = refined["parameters"]["properties"]
    missing = [name for name in old if name not in new]
    if missing:
        failures.append(f"the refined tool dropped the original parameters {missing}")
    for name in (name for name in old if name in new):
        old_types, new_types = _types(old[name]), _types(new[name])
        if new_types is not None and (old_types is None or not old_types <= new_types):
            failures.append(
                f"parameter {name!r} allowed {sorted(old_types or ['any'])}, now {sorted(new_types)}"
            )
        if "enum" in new[name] and not set(map(repr, old[name].get("enum", [None]))) <= set(
            map(repr, new[name]["enum"])
        ):
            failures.append(f"parameter {name!r} lost enum values of the original")
    newly_required = set(refined["parameters"].get("required", [])) - set(
        original["parameters"].get("required", [])
    )
    if newly_required:
        failures.append(
            f"the refined tool makes {sorted(newly_required)} required; new parameters must be optional"
        )
    return failures


def _function_node(code: str, name: str) -> ast.FunctionDef | None:
    """The last top-level definition of ``name`` (the one that runs), if any."""
    nodes = [node for node in ast.parse(code).body if isinstance(node, ast.FunctionDef) and node.name == name]
    return nodes[-1] if nodes else None


def check_signature(code: str, document: Mapping[str, Any]) -> list[str]:
    """The code compiles and defines the tool with exactly the document's parameters; every parameter
    the document does not require has a default."""
    name = document["name"]
    try:
        read_tool_source(code, f"the code of {name}")
    except DataError as exc:
        return [str(exc)]
    except (ValueError, RecursionError, MemoryError) as exc:  # e.g. null bytes in the source
        return [f"the code of {name} cannot be parsed: {error_text(exc)}"]
    node = _function_node(code, name)
    if node is None:
        return [f"the code defines no top-level function named {name!r}"]
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults = {arg.arg for arg in positional[len(positional) - len(args.defaults) :]}
    defaults |= {arg.arg for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True) if default}
    parameters = [arg.arg for arg in (*positional, *args.kwonlyargs)]
    declared = list(document["parameters"]["properties"])
    failures = []
    if set(parameters) != set(declared):
        failures.append(f"{name} takes parameters {parameters}, but the document declares {declared}")
    required = set(document["parameters"].get("required", []))
    no_default = [param for param in parameters if param not in required and param not in defaults]
    if no_default:
        failures.append(f"optional parameters {no_default} of {name} need default values")
    return failures


def parse_proposed_call(
    call: Any, code: str, document: Mapping[str, Any]
) -> tuple[GoldCall | None, list[str]]:
    """The proposed call bound to keyword arguments, and valid against the document's schema."""
    name = document["name"]
    if not isinstance(call, str):
        return None, [f"'call' must be a string of Python such as {name}(...), got {_shown(call)}"]
    try:
        gold = parse_gold_call(call, read_tool_source(code).signatures)
    except DataError as exc:
        return None, [str(exc)]
    if gold.name != name:
        return None, [f"the call {call!r} must call the tool {name!r}"]
    tool = {"type": "function", "function": dict(document)}
    check = ToolValidator([tool]).check(name, gold.arguments)
    if not check.ok:
        return None, [f"the call {call!r} does not match the document: {'; '.join(check.messages)}"]
    return gold, []


def invalid_calls(
    document: Mapping[str, Any], arguments: Mapping[str, Any]
) -> list[tuple[str, dict[str, Any]]]:
    """(description, arguments) of calls that each change one value of a valid call into an invalid one:
    an empty required string, a value of the wrong type for a required parameter, a value outside an enum."""
    properties = document["parameters"]["properties"]
    required = [name for name in document["parameters"].get("required", []) if name in properties]
    calls: list[tuple[str, dict[str, Any]]] = []
    for name in required:
        types = _types(properties[name]) or set()
        if types == {"string"}:
            calls.append((f"{name} empty", {**arguments, name: ""}))
        elif len(types) == 1 and next(iter(types)) in _BAD_VALUE_BY_TYPE:
            calls.append(
                (f"{name} of the wrong type", {**arguments, name: _BAD_VALUE_BY_TYPE[next(iter(types))]})
            )
    enum_names = [name for name in properties if "enum" in properties[name]]
    if enum_names:
        calls.append((f"{enum_names[0]} outside its enum", {**arguments, enum_names[0]: "__not_an_option__"}))
    return calls[:MAX_INVALID_CALLS]


def _outcome(result: CallResult) -> str:
    if result.status == "ok":
        return f"returned {_shown(render_value(result.value))}"
    return f"failed with {result.status}: {_shown(result.error or '')}"


def check_execution(
    sandbox: Sandbox, code: str, document: Mapping[str, Any], call: GoldCall, answer: str
) -> list[str]:
    """Load the code in a fresh sandbox namespace; the call must return a non-error value containing
    ``answer``; each invalid call must return an error value (not raise, hang or return a result)."""
    name = document["name"]
    loaded = sandbox.load([read_tool_source(code).code])
    if loaded.errors or name not in loaded.functions:
        return [f"the code failed to load: {'; '.join(loaded.errors) or f'{name} is not defined'}"]
    result = sandbox.call(name, call.arguments)
    if result.status != "ok" or is_error_value(result.value):
        failures = [f"the call {call.source} {_outcome(result)} instead of the answer {answer!r}"]
    elif not normalized_match(answer, render_value(result.value)):
        failures = [
            f"the call {call.source} {_outcome(result)}, which does not contain the answer {answer!r}"
        ]
    else:
        failures = []
    bad_calls = invalid_calls(document, call.arguments)
    if not bad_calls:
        failures.append("no invalid call can be derived: give at least one required parameter a type")
    for description, arguments in bad_calls:
        bad = sandbox.call(name, arguments)
        if not (bad.status == "ok" and is_error_value(bad.value)):
            shown = ", ".join(f"{key}={value!r}" for key, value in arguments.items())
            failures.append(
                f"the invalid call {name}({shown}) ({description}) {_outcome(bad)}; "
                'it must return a dict {"error": ...} naming the problem'
            )
    return failures
