"""Model text is hostile input: where it enters the host it is made valid Unicode, and parsers read a bounded
prefix of it with linear-time patterns.

A policy under RL emits anything: a lone surrogate (``json.loads`` of a reply holding ``"\\ud800"`` gives
one), megabytes of one word and newlines, a reply cut mid-escape. A lone surrogate cannot be encoded as
UTF-8, so one in a reply would fail every later write of it (the run's records) and every RE2 search of it;
:func:`valid_unicode` replaces each with U+FFFD at the two doors model text comes in by (the agent's model
call and ``env.step``). Parsers read at most :data:`MAX_PARSED_CHARS` of a text (:func:`parsed_text`) and
match in linear time: with RE2 (:func:`linear`) where Python's ``re`` would backtrack, else with scanners.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import re2

MAX_PARSED_CHARS = 2**20
"""Characters of one model text a parser reads (1 Mi); the rest is ignored. A reply this long holds no
meaningful tool call or answer past that point (replies are capped at a few thousand tokens in practice),
and scoring keeps its meaning: an answer is read from its first MiB."""
MAX_JSON_DEPTH = 100
"""Nesting past this many brackets is not read as JSON: Python's ``json`` recurses once per level and fails
near the recursion limit (about 1,000), which depends on the stack the parser is called from."""
REPLACEMENT = "\ufffd"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_BRACKET = re.compile(r"[][{}]")
T = TypeVar("T")

SPACE_CHARACTERS = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""What Python's ``\\s`` (``str.isspace``) matches, written out: finding them among all code points took
0.12 s of CPU at every import of hopgym (tests/agents/test_hostile_model_text.py checks the list against
them)."""
SPACE = "[" + "".join(f"\\x{{{ord(character):x}}}" for character in SPACE_CHARACTERS) + "]"
"""An RE2 character class matching exactly what Python's ``\\s`` matches in a str pattern (RE2's own
``\\s`` is ASCII only): patterns ported from ``re`` keep their meaning."""

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


def linear(pattern: str) -> Any:
    """``pattern`` compiled by RE2: matching time linear in the text, whatever the text. The text must be
    valid Unicode (see :func:`parsed_text`); ``\\s`` must be written as :data:`SPACE`, ``$`` as ``\\z``."""
    return re2.compile(pattern, _OPTIONS)


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (the same object when it has none)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub(REPLACEMENT, text)
    return text


def valid_unicode(value: T) -> T:
    """``value`` (JSON-like data: strings, and dicts, lists, tuples of them) with every string, dict keys
    included, made valid Unicode by :func:`valid_text`; other values are kept as they are, and so is every
    container that held nothing to replace. Iterative, so no nesting depth makes it fail."""
    if isinstance(value, str):
        return valid_text(value)  # type: ignore[return-value]
    if not isinstance(value, (dict, list, tuple)) or _all_valid(value):
        return value
    done: dict[int, Any] = {}
    pending: list[tuple[Any, bool]] = [(value, False)]
    while pending:
        node, children_done = pending.pop()
        if id(node) in done:
            continue
        items = list(node.values()) if isinstance(node, dict) else list(node)
        inner = [item for item in items if isinstance(item, (dict, list, tuple)) and id(item) not in done]
        if not children_done and inner:
            pending.append((node, True))
            pending.extend((item, False) for item in inner)
            continue
        clean = [valid_text(item) if isinstance(item, str) else done.get(id(item), item) for item in items]
        if isinstance(node, dict):
            keys = [valid_text(key) if isinstance(key, str) else key for key in node]
            changed = any(a is not b for a, b in zip([*keys, *clean], [*node, *items], strict=True))
            done[id(node)] = dict(zip(keys, clean, strict=True)) if changed else node
        else:
            changed = any(a is not b for a, b in zip(clean, items, strict=True))
            done[id(node)] = type(node)(clean) if changed else node
    return done[id(value)]  # type: ignore[no-any-return]


def _all_valid(value: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> bool:
    """Whether every string in ``value`` (dict keys included) is valid Unicode already, as almost every
    action is: one pass that only looks, a fraction of the cost of :func:`valid_unicode`'s rebuilding walk."""
    pending: list[Any] = [value]
    seen: set[int] = set()  # a shared sub-object is looked at once, however often it is referenced
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for item in (*node.keys(), *node.values()) if isinstance(node, dict) else node:
            if isinstance(item, str):
                if not item.isascii() and valid_text(item) is not item:
                    return False
            elif isinstance(item, (dict, list, tuple)):
                pending.append(item)
    return True


def parsed_text(text: str | None) -> str:
    """What a parser of model text reads: its first :data:`MAX_PARSED_CHARS` characters, valid Unicode."""
    return valid_text((text or "")[:MAX_PARSED_CHARS])


def outermost_braces(text: str) -> str | None:
    """The span of ``text`` from its first ``{`` to its last ``}`` (where a reply's one JSON object is
    looked for), or None: what ``re.search(r"\\{.*\\}", text, re.S)`` matches, in linear time."""
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if 0 <= start < end else None


def nested_deeper(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``text`` opens more than ``limit`` brackets (``[`` and ``{``) that are still open at one
    point, quoted or not: a bound that a parser's JSON can never go past, whatever template parses it and
    however its strings are escaped. Linear time; a closing bracket with nothing open is ignored."""
    depth = 0
    for bracket in _BRACKET.finditer(text):
        if bracket[0] in "[{":
            depth += 1
            if depth > limit:
                return True
        elif depth:
            depth -= 1
    return False
