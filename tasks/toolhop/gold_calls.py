"""Turning literal example calls (``f('x', flag=True)``) into a tool name and keyword arguments."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from typing import Any

from hopgym.errors import DataError
from hopgym.tasks.toolhop.task import GoldCall


def parse_gold_call(call: str, signatures: Mapping[str, Sequence[str]]) -> GoldCall:
    """Parse one call string; positional arguments are bound to the function's parameter names.

    ``signatures`` maps each defined function to its parameter names (the definition that runs).
    Arguments must be Python literals, since the call is replayed as JSON through the env.
    """
    try:
        node = ast.parse(call.strip(), mode="eval").body
    except SyntaxError as exc:
        raise DataError(f"gold call {call!r} is not a Python expression ({exc.msg})") from exc
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise DataError(f"gold call {call!r} is not a call of a named function")
    name = node.func.id
    if name not in signatures:
        raise DataError(f"gold call {call!r} names {name!r}, which none of the task's functions defines")
    parameters = list(signatures[name])
    if len(node.args) > len(parameters):
        raise DataError(
            f"gold call {call!r} passes {len(node.args)} positional arguments; {name} takes {parameters}"
        )
    try:
        arguments: dict[str, Any] = {
            param: ast.literal_eval(arg) for param, arg in zip(parameters, node.args, strict=False)
        }
        for keyword in node.keywords:
            if keyword.arg is None:
                raise DataError(f"gold call {call!r} uses ** unpacking, which cannot be bound statically")
            if keyword.arg in arguments:
                raise DataError(f"gold call {call!r} gives {keyword.arg!r} twice")
            arguments[keyword.arg] = ast.literal_eval(keyword.value)
    except ValueError as exc:
        raise DataError(f"gold call {call!r} has an argument that is not a literal ({exc})") from exc
    return GoldCall(name=name, arguments=arguments, source=call)
