"""A fast yes for arguments that a tool schema accepts, so that jsonschema runs only to name what is wrong.

jsonschema's ``iter_errors`` costs about 15 µs for a small ToolHop schema even when the arguments are
valid, as they are on almost every call, and 8 ms for a KG tool's list of a thousand entities (0.1 ms here).
:func:`acceptor` turns a schema built only from the keywords ToolHop's and the generated KG tools' schemas
use (``type``, ``enum`` of strings, ``properties``, ``required``, ``items``, ``additionalProperties``, the
length and range bounds, a flat ``anyOf``; keywords jsonschema does not apply, such as ``description`` and
``default``, are ignored as jsonschema ignores them) into a predicate over plain JSON values that is True
only when Draft 2020-12 finds no error. It may say False for valid arguments (an
integral float for ``"integer"``, a non-string ``enum`` value): the caller then runs jsonschema, which has
the last word and writes every message. A schema using anything else has no acceptor (None), and so has one
with a ``$schema`` (jsonschema switches to that dialect's validator below it). A check costs time linear in
the arguments: repeated ``type`` names and ``required`` keys are folded when the acceptor is built, so a
schema cannot multiply the work done per value (the acceptor runs before the validation budget starts);
an ``anyOf`` has at most :data:`MAX_ALTERNATIVES` alternatives and none below it, so a value is checked at
most that many times.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

MAX_ALTERNATIVES = 4
Accept = Callable[[Any], bool]
"""True: the value is valid under the schema; False: not known to be (ask jsonschema)."""

_TYPES: Mapping[str, Accept] = {
    "string": lambda value: isinstance(value, str),
    "boolean": lambda value: isinstance(value, bool),
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "number": lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    "array": lambda value: isinstance(value, list),
    "object": lambda value: isinstance(value, dict),
    "null": lambda value: value is None,
}


class _Unsupported(Exception):
    """The schema uses a keyword, or a keyword value, that the acceptor does not reproduce."""


def acceptor(schema: Any, applied: frozenset[str]) -> Accept | None:
    """The predicate of ``schema`` (see the module's docstring), or None when the schema is outside the
    subset. ``applied``: the keywords the validator applies (any other keyword is an annotation)."""
    try:
        return _accept(schema, applied)
    except (_Unsupported, RecursionError):
        return None


def _accept(schema: Any, applied: frozenset[str]) -> Accept:
    if schema is True:
        return lambda value: True
    if not isinstance(schema, dict) or "$schema" in schema:
        raise _Unsupported
    checks = [
        _keyword(keyword, bound, schema, applied) for keyword, bound in schema.items() if keyword in applied
    ]
    if len(checks) == 1:  # e.g. each item of a long array against {"type": "string"}: no loop around it
        return checks[0]

    def accept(value: Any) -> bool:
        for check in checks:  # noqa: SIM110 - a loop: all() over a generator costs a frame a call
            if not check(value):
                return False
        return True

    return accept


def _keyword(keyword: str, bound: Any, schema: dict[str, Any], applied: frozenset[str]) -> Accept:
    """The check of one keyword of ``schema``, as jsonschema applies it (a value of another type passes)."""
    if keyword == "type":
        names = bound if isinstance(bound, list) else [bound]
        if not names or not all(isinstance(name, str) and name in _TYPES for name in names):
            raise _Unsupported
        tests = [_TYPES[name] for name in dict.fromkeys(names)]  # at most seven, however many are listed
        if len(tests) == 1:
            return tests[0]
        return lambda value: any(test(value) for test in tests)
    if keyword == "enum":
        if not isinstance(bound, list) or not all(isinstance(member, str) for member in bound):
            raise _Unsupported
        members = frozenset(bound)
        return lambda value: isinstance(value, str) and value in members
    if keyword == "properties":
        if not isinstance(bound, dict):
            raise _Unsupported
        inner = {name: _accept(subschema, applied) for name, subschema in bound.items()}

        def properties(value: Any) -> bool:
            if isinstance(value, dict):
                for name, item in value.items():
                    check = inner.get(name)
                    if check is not None and not check(item):
                        return False
            return True

        return properties
    if keyword == "required":
        if not isinstance(bound, list) or not all(isinstance(name, str) for name in bound):
            raise _Unsupported
        required = frozenset(bound)
        return lambda value: not isinstance(value, dict) or required <= value.keys()
    if keyword == "additionalProperties":
        return _additional(bound, schema, applied)
    if keyword == "anyOf":
        return _any_of(bound, applied)
    if keyword == "items":
        item = _accept(bound, applied)
        return lambda value: not isinstance(value, list) or all(map(item, value))
    if keyword == "format":  # an annotation: the validator has no format checker
        return lambda value: True
    return _bound(keyword, bound)


def _additional(bound: Any, schema: dict[str, Any], applied: frozenset[str]) -> Accept:
    declared = schema.get("properties", {})  # a schema with patternProperties or non-dict properties
    if not isinstance(bound, (bool, dict)):  # has no acceptor: their keywords raise _Unsupported
        raise _Unsupported
    if bound is True:
        return lambda value: True
    if bound is False:
        return lambda value: not isinstance(value, dict) or all(key in declared for key in value)
    extra = _accept(bound, applied)
    return lambda value: (
        not isinstance(value, dict) or all(extra(item) for key, item in value.items() if key not in declared)
    )


def _any_of(bound: Any, applied: frozenset[str]) -> Accept:
    """Valid under one alternative is valid under the ``anyOf``; an empty list (no alternative) is left to
    jsonschema, which rejects every value."""
    if not isinstance(bound, list) or not 0 < len(bound) <= MAX_ALTERNATIVES or holds_key(bound, "anyOf"):
        raise _Unsupported
    alternatives = [_accept(subschema, applied) for subschema in bound]
    return lambda value: any(alternative(value) for alternative in alternatives)


def holds_key(document: Any, key: str) -> bool:
    """Whether an object anywhere in the JSON ``document`` has ``key`` (a property so named counts too)."""
    pending = [document]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            if key in value:
                return True
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False


def _bound(keyword: str, bound: Any) -> Accept:
    """``minItems`` / ``maxItems``, ``minLength`` / ``maxLength``, ``minimum`` / ``maximum``."""
    if isinstance(bound, bool):
        raise _Unsupported
    if keyword in ("minItems", "maxItems", "minLength", "maxLength") and isinstance(bound, int):
        kind = list if keyword.endswith("Items") else str
        if keyword.startswith("min"):
            return lambda value: not isinstance(value, kind) or len(value) >= bound
        return lambda value: not isinstance(value, kind) or len(value) <= bound
    if keyword in ("minimum", "maximum") and isinstance(bound, (int, float)):
        number = _TYPES["number"]
        if keyword == "minimum":
            return lambda value: not number(value) or not value < bound
        return lambda value: not number(value) or not value > bound
    raise _Unsupported
