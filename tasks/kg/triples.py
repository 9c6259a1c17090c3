"""Reading triples written as bracketed lists, quoted Python-style or bare."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hopgym.errors import DataError
from hopgym.tasks.user_files import read_user_text

Triple = tuple[str, str, str]

_BRACKET_GROUP = re.compile(r"\[([^\[\]]*)\]")


def parse_triple(group: str) -> Triple:
    """Parse the inside of one ``[h, r, t]`` group: ``'Bob', 'mother', 'Alice'`` or ``Bob, mother, Alice``."""
    if "'" in group or '"' in group:
        try:
            parts = ast.literal_eval(f"[{group}]")
        except (ValueError, SyntaxError) as exc:
            raise DataError(f"unreadable quoted triple [{group}]: {exc}") from exc
        if not all(isinstance(part, str) for part in parts):
            raise DataError(f"triple [{group}] must hold three strings")
    else:
        parts = group.split(",")
    names = [part.strip() for part in parts]
    if len(names) != 3 or not all(names):
        raise DataError(f"triple [{group}] must have exactly three non-empty parts (head, relation, tail)")
    return names[0], names[1], names[2]


def parse_triples(text: str) -> list[Triple]:
    """Every ``[h, r, t]`` group of a text, in order (the form FamilyTool inlines its golden sub-KGs in)."""
    return [parse_triple(group) for group in _BRACKET_GROUP.findall(text)]


def quotes_triples(text: str) -> bool:
    """Whether the triples of a text are quoted Python-style (['Bob', ...]) rather than bare ([Bob, ...])."""
    return any("'" in group or '"' in group for group in _BRACKET_GROUP.findall(text))


def read_triples_file(path: str | Path) -> list[Triple]:
    """A KG file with one bracketed triple per line (blank lines ignored)."""
    path = Path(path)
    lines = read_user_text(path, "KG file").splitlines()
    triples = []
    for number, line in enumerate(lines, start=1):
        line = line.strip()
        if not line:
            continue
        match = _BRACKET_GROUP.fullmatch(line)
        if match is None:
            raise DataError(
                f"{path}:{number}: expected one triple like ['head', 'relation', 'tail'], got {line!r}"
            )
        try:
            triples.append(parse_triple(match.group(1)))
        except DataError as exc:
            raise DataError(f"{path}:{number}: {exc}") from exc
    return triples
