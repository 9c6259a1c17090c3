"""Reading a ToolTasks-v0 file: every row checked against the published JSON Schema (row.schema.json) and
parsed as ToolHop's loader parses its rows, and every bad row named with its line and problem in one
:class:`~hopgym.errors.DataError` before any episode starts."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from hopgym.errors import DataError
from hopgym.tasks.toolhop.loader import task_from_row
from hopgym.tasks.toolhop.task import Task
from hopgym.tasks.user_files import read_user_text

ROW_SCHEMA: dict[str, Any] = json.loads(
    (resources.files("hopgym.envs.tooltasks") / "row.schema.json").read_text(encoding="utf-8")
)
"""The JSON Schema of a row (published as envs/tooltasks/row.schema.json)."""
_VALIDATOR = jsonschema.Draft202012Validator(ROW_SCHEMA)
_BETWEEN_ROWS = re.compile(r"[\s,]*")


def _numbered_rows(text: str) -> Iterator[tuple[int, Any]]:
    """(line, row or the JSON error) of a JSONL file, or of a JSON list (each element at its first line)."""
    if not text.lstrip().startswith("["):
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    yield number, json.loads(line)
                except (ValueError, RecursionError) as exc:  # not JSON, a 5000-digit number, deep nesting
                    yield number, exc
        return
    try:
        json.loads(text)  # the list as a whole is strict JSON; the scan below only finds where rows start
    except json.JSONDecodeError as exc:
        yield exc.lineno, exc
        return
    except (ValueError, RecursionError) as exc:
        yield 1, exc
        return
    decoder, position, start, number = json.JSONDecoder(), text.index("[") + 1, 0, 1
    while True:
        position = _BETWEEN_ROWS.match(text, position).end()  # type: ignore[union-attr]  # matches the empty string too
        number, start = number + text.count("\n", start, position), position
        if text.startswith("]", position):
            return
        try:
            row, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            yield number, exc
            return
        yield number, row


def _problem(row: Any) -> str | None:
    """What is wrong with a parsed row by the schema, or None."""
    if isinstance(row, json.JSONDecodeError):
        return f"not JSON ({row.msg} at column {row.colno})"
    if isinstance(row, RecursionError):
        return "not JSON it can read (nested too deep)"
    if isinstance(row, ValueError):
        return f"not JSON it can read ({str(row)[:200]})"
    errors = sorted(_VALIDATOR.iter_errors(row), key=lambda error: list(error.absolute_path))
    if not errors:
        return None
    where = "/".join(map(str, errors[0].absolute_path))
    return f"{where + ': ' if where else ''}{errors[0].message}"


def read_tool_tasks(path: Path) -> list[Task]:
    """The tasks of a JSONL or JSON-list file of rows in ToolHop's shape; :class:`DataError` naming every bad
    row (``path:line: problem``) when any is."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise DataError(f"cannot read the ToolTasks file {str(path)!r}: {exc}") from exc
    return list(_parse(path.resolve(), stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=4)
def _parse(path: Path, size: int, mtime_ns: int) -> tuple[Task, ...]:
    """The tasks of one file version (parsed once: a runner makes one env per concurrent episode);
    ``size`` and ``mtime_ns`` are only the cache key."""
    text = read_user_text(path, "ToolTasks file")
    tasks, problems = [], []
    for line, row in _numbered_rows(text):
        problem = _problem(row)
        if problem is None:
            try:
                tasks.append(task_from_row({"sub_task": {}, "id": str(line), **row}, line))
            except DataError as exc:
                problem = str(exc)
        if problem is not None:
            problems.append(f"{path}:{line}: {problem}")
    if problems:
        raise DataError(f"{len(problems)} bad row(s) in the ToolTasks file:\n" + "\n".join(problems))
    if not tasks:
        raise DataError(f"{path}: the ToolTasks file holds no rows")
    return tuple(tasks)
