"""The optional ``restricted`` code policy: RestrictedPython inside the worker (defence in depth).

The OS-level isolation (namespaces, uid, seccomp, rlimits) is the boundary; this layer only narrows what
tool code can name: no underscore attributes (so no ``__subclasses__`` walks), imports from a list of
computational standard-library modules only, guarded item and attribute writes. Loaded by the worker
(``code_policy.load_policy``), so it uses nothing but the standard library and RestrictedPython.

RestrictedPython refuses augmented assignment to items and attributes (``x[k] += v``, ``self.n += 1``),
which ToolHop code uses; the source is first rewritten to the plain form (``x[k] = x[k] + v``), which
evaluates ``x`` and ``k`` twice: the same result for the side-effect-free targets such code uses.
"""

from __future__ import annotations

import ast
import builtins
import operator
import sys
import types
from typing import Any, Literal

from RestrictedPython import compile_restricted, safe_builtins, utility_builtins
from RestrictedPython.Eval import default_guarded_getitem, default_guarded_getiter
from RestrictedPython.Guards import (
    full_write_guard,
    guarded_iter_unpack_sequence,
    guarded_unpack_sequence,
    safer_getattr,
)

ALLOWED_MODULES = frozenset(
    {
        "math", "cmath", "random", "statistics", "decimal", "fractions", "numbers",
        "datetime", "calendar", "time", "zoneinfo",
        "re", "string", "textwrap", "difflib", "unicodedata",
        "json", "csv", "base64", "binascii", "hashlib", "uuid", "xml",
        "collections", "itertools", "functools", "operator", "heapq", "bisect", "copy",
        "typing", "enum", "dataclasses", "abc",
    }
)  # fmt: skip
"""Top-level modules tool code may import under the restricted policy."""

_EXTRA_BUILTINS = (
    "all", "any", "dict", "enumerate", "filter", "format", "iter", "map", "max", "min", "next",
    "reversed", "sorted", "sum", "zip", "object", "property", "staticmethod", "classmethod", "super", "bytes",
    "list", "tuple", "range",
)  # fmt: skip
"""Plain builtins added to RestrictedPython's safe set; ``list``/``tuple``/``range`` replace its limited
versions, which are functions (breaking ``isinstance``) and cap ranges at 1000 items (rlimits bound
memory instead)."""

_INPLACE_OPERATORS = {
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "<<=": operator.ilshift,
    ">>=": operator.irshift, "&=": operator.iand, "|=": operator.ior, "^=": operator.ixor,
    "@=": operator.imatmul,
}  # fmt: skip


class AugmentedAssignmentRewriter(ast.NodeTransformer):
    """``x[k] += v`` -> ``x[k] = x[k] + v`` and ``o.a += v`` -> ``o.a = o.a + v``."""

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.target, (ast.Subscript, ast.Attribute)):
            return node
        read = _with_context(node.target, ast.Load())
        value = ast.BinOp(left=read, op=node.op, right=node.value)
        return ast.copy_location(ast.Assign(targets=[node.target], value=value), node)


def _with_context(node: ast.Subscript | ast.Attribute, context: ast.expr_context) -> ast.expr:
    copy = ast.parse(ast.unparse(node), mode="eval").body
    assert isinstance(copy, (ast.Subscript, ast.Attribute))  # unparsing and parsing keep the node's type
    copy.ctx = context
    return copy


def rewrite_source(source: str) -> str:
    """The source with item/attribute augmented assignments spelled out."""
    tree = AugmentedAssignmentRewriter().visit(ast.parse(source))
    return ast.unparse(ast.fix_missing_locations(tree))


def guarded_import(name: str, globals=None, locals=None, fromlist=(), level: int = 0) -> types.ModuleType:
    if level != 0 or name.partition(".")[0] not in ALLOWED_MODULES:
        raise ImportError(f"import of {name!r} is not allowed by the restricted policy")
    return __import__(name, globals, locals, fromlist, level)


def _inplace(op: str, target: object, value: object) -> object:
    return _INPLACE_OPERATORS[op](target, value)


class _Printer:
    """RestrictedPython's ``print`` hook, writing to the worker's captured stdout."""

    def __init__(self, _getattr_=None) -> None:
        pass

    def _call_print(self, *objects: object, **kwargs: Any) -> None:
        kwargs.setdefault("file", sys.stdout)
        print(*objects, **kwargs)


TOOL_MODULE = "__tools__"
"""``__name__`` of the tool namespace, hence ``__module__`` of every class the tool code defines."""


def _write_guard(target: object) -> object:
    """Attribute writes are allowed on instances of the tool's own classes (``self.total = 0``);
    everything else goes through RestrictedPython's guard (containers yes, modules and builtins no)."""
    if getattr(type(target), "__module__", None) == TOOL_MODULE:
        return target
    return full_write_guard(target)


def _guarded_hasattr(obj: object, name: str) -> bool:
    try:
        safer_getattr(obj, name)
    except (AttributeError, NameError):
        return False
    return True


class RestrictedPolicy:
    """Compiles with RestrictedPython and supplies its guards as the namespace's builtins."""

    name = "restricted"

    def compile(self, source: str, filename: str, mode: Literal["exec", "eval", "single"]) -> types.CodeType:
        return compile_restricted(rewrite_source(source), filename, mode)

    def globals(self) -> dict:
        restricted = {**safe_builtins, **utility_builtins}
        restricted.update({name: getattr(builtins, name) for name in _EXTRA_BUILTINS})
        restricted.update(__import__=guarded_import, getattr=safer_getattr, hasattr=_guarded_hasattr)
        return {
            "__builtins__": restricted,
            "__name__": TOOL_MODULE,
            "__metaclass__": type,
            "_getattr_": safer_getattr,
            "_getitem_": default_guarded_getitem,
            "_getiter_": default_guarded_getiter,
            "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
            "_unpack_sequence_": guarded_unpack_sequence,
            "_write_": _write_guard,
            "_inplacevar_": _inplace,
            "_print_": _Printer,
            "_apply_": lambda function, *args, **kwargs: function(*args, **kwargs),
        }


def make_policy(name: str) -> RestrictedPolicy:
    if name != "restricted":
        raise ValueError(f"unknown code policy {name!r}; valid: 'restricted'")
    return RestrictedPolicy()
