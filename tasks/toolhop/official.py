"""The official ToolHop evaluation's prompt templates, read as data from the benchmark's own script.

The official code (``code/evaluation_closed.py`` of the Hugging Face dataset, same pinned revision as the
data) builds one user message per scenario with an f-string. hopgym does not copy that text: it finds the
script (``$HOPGYM_DATA/toolhop/official/``, else the user cache, else a sha256-checked hub download) and
reads the three f-strings from its syntax tree, keeping their literal parts and the question slot.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from hopgym.errors import DataError
from hopgym.tasks.toolhop.hub import cache_dir, download_hub_file
from hopgym.tasks.user_files import read_user_bytes

OFFICIAL_FILENAME = "code/evaluation_closed.py"
OFFICIAL_SHA256 = "1f90588100f48b806dd0744c53ab7f4a9ace19f057c1f4753bae83634baf3424"
"""The pinned script; a copy with another digest (a later edit, a local change) is refused."""

SCENARIO_FUNCTIONS = {
    "direct": "sample_process_direct",
    "mandatory": "sample_process_mandatory",
    "free": "sample_process_free",
}
"""The official function that builds each scenario's first message."""


@dataclass(frozen=True)
class PromptTemplate:
    """An official f-string: literal parts, with ``None`` where the question goes."""

    parts: tuple[str | None, ...]

    def render(self, question: str) -> str:
        return "".join(question if part is None else part for part in self.parts)


def official_script_path() -> Path:
    """The official script: ``$HOPGYM_DATA/toolhop/official/``, else the user cache, else a download."""
    data_root = os.environ.get("HOPGYM_DATA")
    if data_root:
        local = Path(data_root) / "toolhop" / "official" / Path(OFFICIAL_FILENAME).name
        if local.is_file():
            return local
    cached = cache_dir() / OFFICIAL_FILENAME
    if cached.is_file():
        return cached
    return download_hub_file(
        OFFICIAL_FILENAME, cache_dir(), OFFICIAL_SHA256, "set HOPGYM_DATA to a folder with toolhop/official/"
    )


def _question_slot(node: ast.FormattedValue, where: str) -> None:
    """Accept only ``{sample['question']}``, the one placeholder the official prompts have."""
    value = node.value
    is_question = (
        isinstance(value, ast.Subscript)
        and isinstance(value.value, ast.Name)
        and value.value.id == "sample"
        and isinstance(value.slice, ast.Constant)
        and value.slice.value == "question"
        and node.conversion == -1
        and node.format_spec is None
    )
    if not is_question:
        raise DataError(f"{where}: unexpected placeholder {ast.unparse(node)!r} in the official prompt")


def _user_prompt(function: ast.FunctionDef, where: str) -> PromptTemplate:
    prompts = [
        value
        for node in ast.walk(function)
        if isinstance(node, ast.Dict)
        for key, value in zip(node.keys, node.values, strict=True)
        if isinstance(key, ast.Constant) and key.value == "content" and isinstance(value, ast.JoinedStr)
    ]
    if len(prompts) != 1:
        raise DataError(f"{where}: expected one f-string user message, found {len(prompts)}")
    parts: list[str | None] = []
    for piece in prompts[0].values:
        if isinstance(piece, ast.Constant) and isinstance(piece.value, str):
            parts.append(piece.value)
        elif isinstance(piece, ast.FormattedValue):
            _question_slot(piece, where)
            parts.append(None)
        else:
            raise DataError(f"{where}: unexpected part {ast.unparse(piece)!r} in the official prompt")
    return PromptTemplate(tuple(parts))


def prompt_templates_from_source(source: str, origin: str) -> dict[str, PromptTemplate]:
    """The three scenarios' templates from the official script's source text."""
    try:
        module = ast.parse(source)
    except SyntaxError as exc:
        raise DataError(f"{origin} is not valid Python ({exc.msg}, line {exc.lineno})") from exc
    functions = {node.name: node for node in module.body if isinstance(node, ast.FunctionDef)}
    templates = {}
    for scenario, name in SCENARIO_FUNCTIONS.items():
        if name not in functions:
            raise DataError(f"{origin} has no function {name}; is it the official evaluation_closed.py?")
        templates[scenario] = _user_prompt(functions[name], f"{origin}, {name}")
    return templates


@functools.lru_cache(maxsize=4)
def _templates_of(path: Path, size: int, mtime_ns: int) -> dict[str, PromptTemplate]:
    """``size`` and ``mtime_ns`` are only the cache key (a replaced file is read again)."""
    # Hashed and parsed from one read: a file swapped after the check cannot get its code parsed.
    source = read_user_bytes(path, "official ToolHop script")
    digest = hashlib.sha256(source).hexdigest()
    if digest != OFFICIAL_SHA256:
        raise DataError(
            f"{str(path)!r} has sha256 {digest}, not the pinned official script's {OFFICIAL_SHA256}"
        )
    return prompt_templates_from_source(source.decode("utf-8"), str(path))


def official_prompt_templates(path: Path | None = None) -> dict[str, PromptTemplate]:
    """Scenario name -> the official first user message's template (``path`` defaults to the lookup)."""
    path = (path or official_script_path()).resolve()
    stat = path.stat()
    return _templates_of(path, stat.st_size, stat.st_mtime_ns)
