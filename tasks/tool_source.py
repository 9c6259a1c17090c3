"""Reading LLM-generated tool code safely: strip example usage, read signatures.

ToolHop function strings often end with top-level "example usage" code that calls the tool and prints.
Executing such a string would run that code at load time, so the module body is filtered by AST:
imports, function and class definitions and constant assignments are kept, everything else is dropped.
Kept statements are copied verbatim from the source (comments and line layout survive).
"""

from __future__ import annotations
import __future__

import ast
import marshal
from dataclasses import dataclass
from importlib.util import MAGIC_NUMBER

from hopgym.errors import DataError

_KEPT_STATEMENTS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
MAX_SOURCE_CHARS = 128 * 1024
"""Longest tool source parsed on the host (ToolHop's stay under 4 KB); parsing costs about 250 bytes of
host memory per character, so an unbounded source could take gigabytes."""
_WORKER_FLAGS = __future__.annotations.compiler_flag
"""The future features the sandbox worker's ``compile`` inherits (its module imports ``annotations``)."""


@dataclass(frozen=True)
class ToolSource:
    code: str
    """The source with only definitions, imports and constant assignments left."""
    signatures: dict[str, list[str]]
    """Each top-level function's parameter names, in signature order (a later definition wins)."""


def _is_constant_assignment(node: ast.stmt) -> bool:
    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    if value is None:
        return False
    try:
        ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _line_span(node: ast.stmt) -> tuple[int, int]:
    decorators = getattr(node, "decorator_list", [])
    start = min([node.lineno, *(d.lineno for d in decorators)])
    return start, node.end_lineno or node.lineno


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = node.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]


def read_tool_source(source: str, origin: str = "tool source") -> ToolSource:
    """Filter ``source`` to definitions and read its signatures; ``origin`` names it in errors."""
    if not isinstance(source, str):
        raise DataError(f"{origin}: tool code must be a string, got {type(source).__name__}")
    if len(source) > MAX_SOURCE_CHARS:
        raise DataError(
            f"{origin}: tool code is {len(source)} characters long; at most {MAX_SOURCE_CHARS} are parsed"
        )
    try:
        module = ast.parse(source)
    except SyntaxError as exc:
        raise DataError(f"{origin}: tool code is not valid Python ({exc.msg}, line {exc.lineno})") from exc
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, nesting past the parser's stack
        raise DataError(f"{origin}: tool code cannot be parsed ({type(exc).__name__}: {exc})") from exc
    lines = source.splitlines()
    spans = [_line_span(node) for node in module.body]
    kept: list[str] = []
    signatures: dict[str, list[str]] = {}
    for index, node in enumerate(module.body):
        if not (isinstance(node, _KEPT_STATEMENTS) or _is_constant_assignment(node)):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            signatures[node.name] = _parameters(node)
        start, end = spans[index]
        shares_a_line = any(
            other != index and spans[other][0] <= end and start <= spans[other][1]
            for other in (index - 1, index + 1)
            if 0 <= other < len(spans)
        )
        # A statement sharing a line with another (``def f(): ...; f()``) cannot be cut out by lines.
        kept.append(ast.unparse(node) if shares_a_line else "\n".join(lines[start - 1 : end]))
    return ToolSource(code="\n\n".join(kept) + "\n", signatures=signatures)


def compile_tool_code(code: str, index: int) -> bytes | None:
    """``code`` (an episode's ``index``-th source) compiled as the sandbox worker compiles a source's text
    (``<tool source INDEX>``, postponed annotations, no optimisation), as this interpreter's magic number
    and marshal data: a worker of the same interpreter runs it without compiling (see ``Sandbox.load``).
    None when it does not compile: the worker then compiles the text and reports the error."""
    try:
        compiled = compile(
            code, f"<tool source {index}>", "exec", _WORKER_FLAGS, dont_inherit=True, optimize=0
        )
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return MAGIC_NUMBER + marshal.dumps(compiled)
