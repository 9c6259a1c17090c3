"""Tool documents are data: checking a tool's JSON schema once, and validating arguments against it safely.

A task row's schema is hostile input that the host evaluates. So a ``$ref`` resolves only inside the document
(a :class:`referencing.Registry` that refuses to retrieve anything: no network, no files); a schema is
size-capped and holds no ``$schema`` (below one, jsonschema switches to that dialect's own validator); its
references and patterns are checked before it is used; ``pattern`` and ``patternProperties`` run on RE2
(linear time, so no catastrophic backtracking; a pattern RE2 cannot run is refused); ``uniqueItems`` hashes
canonical JSON instead of comparing every pair; and each validation has a wall-clock budget checked at every
keyword it applies. Checking every schema against the meta-schema would cost about 5 ms a tool (25 s for the
full ToolHop file), so a keyword with a malformed value (``"type": "strin"``) is reported on the call that
meets it instead, as an :class:`ArgumentCheckError`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import re2
from jsonschema import Draft202012Validator, ValidationError
from jsonschema.validators import extend
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable
from referencing.jsonschema import DRAFT202012

from hopgym.errors import DataError, error_text
from hopgym.tasks.schema_accept import Accept, acceptor, holds_key

MAX_SCHEMA_BYTES = 64 * 1024
"""Longest tool schema accepted, as JSON text (the real ToolHop schemas stay under 3 KiB)."""
VALIDATION_SECONDS = 1.0
"""Wall-clock budget of one validation; real schemas take microseconds."""
_REFERENCE_KEYWORDS = ("$ref", "$dynamicRef")


class ArgumentCheckError(Exception):
    """Arguments could not be checked: the validation ran past :data:`VALIDATION_SECONDS`, nested deeper than
    the interpreter allows, or met a malformed keyword in the schema."""


def _refuse_retrieval(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # referencing's attrs stub hides __init__


REGISTRY: Registry = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]
"""Holds nothing and retrieves nothing: a reference can only point into the schema that holds it."""

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_deadline: contextvars.ContextVar[float] = contextvars.ContextVar("hopgym_validation_deadline")


@functools.lru_cache(maxsize=4096)
def _regex(pattern: str) -> Any:
    """The RE2 program of ``pattern``; ``re2.error`` for syntax RE2 does not run (e.g. backreferences)."""
    return re2.compile(pattern, _RE2_OPTIONS)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _regex(pattern).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _canonical(value: Any) -> Any:
    """``value`` with integral floats as ints, so that equal JSON values (1 and 1.0) serialise alike."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items()}
    return value


def _unique_items(validator: Any, unique: bool, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """Linear time: jsonschema's own check compares unsortable items pairwise (hours for 30k objects)."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen = {json.dumps(_canonical(item), sort_keys=True) for item in instance}
    if len(seen) < len(instance):
        yield ValidationError("the array has non-unique elements")


def _budgeted(keyword: Callable[..., Any]) -> Callable[..., Any]:
    def apply(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if time.monotonic() > _deadline.get(float("inf")):
            raise ArgumentCheckError(f"validation took longer than {VALIDATION_SECONDS:g} s")
        return keyword(validator, value, instance, schema)

    return apply


_KEYWORDS = {
    **Draft202012Validator.VALIDATORS,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "uniqueItems": _unique_items,
}
SafeValidator = extend(
    Draft202012Validator, validators={name: _budgeted(keyword) for name, keyword in _KEYWORDS.items()}
)
"""Draft 2020-12 with the safe keywords above, each application checked against the budget."""


@dataclass(frozen=True)
class ArgumentValidator:
    """A schema's jsonschema validator and, for the common subset of schemas, its fast acceptor
    (:mod:`hopgym.tasks.schema_accept`), which spares jsonschema's walk for valid arguments."""

    validator: Any
    accepts: Accept | None


_APPLIED = frozenset(SafeValidator.VALIDATORS)


def argument_validator(schema: Mapping[str, Any]) -> ArgumentValidator:
    """A validator of arguments for a schema that :func:`check_tool_schema` accepted."""
    return ArgumentValidator(SafeValidator(schema, registry=REGISTRY), acceptor(schema, _APPLIED))


def argument_errors(validator: ArgumentValidator, arguments: Any, limit: int) -> list[ValidationError]:
    """At most ``limit`` errors of ``arguments`` (plain JSON data), found within the budget (else
    ArgumentCheckError); none, without asking jsonschema, when the fast acceptor accepts them."""
    with contextlib.suppress(RecursionError):
        if validator.accepts is not None and validator.accepts(arguments):
            return []
    token = _deadline.set(time.monotonic() + VALIDATION_SECONDS)
    try:
        errors = []
        for error in validator.validator.iter_errors(arguments):
            errors.append(error)
            if len(errors) >= limit:
                break
        return errors
    except ArgumentCheckError:
        raise
    except RecursionError as exc:
        raise ArgumentCheckError("the arguments or the schema nest too deeply to validate") from exc
    except Exception as exc:  # a malformed keyword value raises anything (UnknownType, TypeError ...)
        raise ArgumentCheckError(
            f"the tool's parameters schema cannot be applied ({type(exc).__name__}: {str(exc)[:300]})"
        ) from exc
    finally:
        _deadline.reset(token)


def check_tool_schema(schema: Any, origin: str) -> None:
    """Refuse a tool schema the host cannot use safely; ``origin`` names the row and tool in the error."""
    try:
        text = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError, RecursionError) as exc:
        raise DataError(f"{origin}: the parameters schema is not JSON ({error_text(exc)})") from exc
    if len(text) > MAX_SCHEMA_BYTES:
        raise DataError(
            f"{origin}: the parameters schema is {len(text)} bytes of JSON; "
            f"at most {MAX_SCHEMA_BYTES} are allowed"
        )
    problem = _schema_problem(text)
    if problem is not None:
        raise DataError(f"{origin}: {problem}")


@functools.lru_cache(maxsize=4096)
def _schema_problem(text: str) -> str | None:
    """What makes a schema (as sorted JSON text) unusable, or None; cached, as every episode rechecks."""
    schema = json.loads(text)
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return 'the parameters schema must be a JSON object schema ({"type": "object", ...})'
    if holds_key(schema, "$schema"):  # a $ref can reach one anywhere: the whole document is searched
        return (
            "$schema is refused anywhere in a tool schema (tool schemas are read as Draft 2020-12; below a "
            "$schema jsonschema switches to that dialect's own validator, without the linear-time pattern "
            "engine and the time budget)"
        )
    try:
        resource = DRAFT202012.create_resource(schema)
        _check_subschema(schema, REGISTRY.resolver_with_root(resource))
    except RecursionError:
        return "the parameters schema nests too deeply"
    except _UnsafeSchema as exc:
        return str(exc)
    except (AttributeError, TypeError, ValueError) as exc:  # e.g. "properties" holding a list
        return f"the parameters schema is malformed ({type(exc).__name__}: {str(exc)[:300]})"
    return None


class _UnsafeSchema(Exception):
    pass


def _check_subschema(schema: Any, resolver: Any) -> None:
    """Every reference resolves inside the document and every pattern runs on RE2, recursively."""
    if not isinstance(schema, dict):
        return
    for keyword in _REFERENCE_KEYWORDS:
        if keyword in schema:
            try:
                resolver.lookup(schema[keyword])
            except Unresolvable as exc:
                raise _UnsafeSchema(
                    f"{keyword} {schema[keyword]!r} does not point inside the schema; references to other "
                    "documents, files or URLs are refused"
                ) from exc
    patterns = [schema["pattern"]] if isinstance(schema.get("pattern"), str) else []
    patterns += list(schema.get("patternProperties") or {})
    for pattern in patterns:
        try:
            _regex(pattern)
        except re2.error as exc:
            raise _UnsafeSchema(
                f"pattern {pattern[:200]!r} cannot run on the linear-time engine (RE2: {exc}); "
                "backreferences and lookaround are refused"
            ) from exc
    for subschema in DRAFT202012.subresources_of(schema):
        _check_subschema(subschema, resolver.in_subresource(DRAFT202012.create_resource(subschema)))
