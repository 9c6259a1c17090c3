"""Values read from a worker, bounded on the host in parsed objects, not only in bytes.

A reply line is refused past a size in bytes before it is parsed (``protocol.reply_cap``), but JSON
expands: a line of empty objects becomes about 24 times its size in host objects, and a value nested some
hundreds of levels deep parses, yet makes whatever walks it later (``json.dumps`` of a record, a schema
check, a copy) hit the recursion limit. So each value the host keeps from a worker passes :func:`bounded`:
at most :data:`MAX_DEPTH` levels, and a :class:`Budget` of items and characters that what is kept spends;
the excess becomes a marker string, worded as the worker marks a result cut at its cap. The walk is
iterative, so no nesting can exhaust the host's stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 64
"""Levels of lists and objects kept in a value (a worker's own JSON encoder allows about 1,000)."""
MARKER_ROOM = 64
"""Characters past a cap that the worker's truncation marker adds to a result it cut."""


@dataclass
class Budget:
    """What a bounded value may still hold: ``items`` (list elements and object entries, at every level)
    and ``chars`` (of strings, keys included, and of integers' digits)."""

    items: int
    chars: int


def bounded(value: Any, budget: Budget) -> tuple[Any, bool]:
    """``value`` (JSON data) cut to ``budget``, which it spends, and to :data:`MAX_DEPTH` levels; and
    whether anything was cut. A value within both comes back as it is (measured, not copied)."""
    if _fits(value, budget):
        return value, False
    cut = False
    root: list[Any] = [None]
    pending: list[tuple[Any, Any, Any, int]] = [(value, root, 0, 0)]
    while pending:  # pre-order: the first items of a value are the ones kept
        item, parent, slot, depth = pending.pop()
        kept: Any = item
        if isinstance(item, str):
            kept = _text(item, budget)
            cut = cut or kept is not item
        elif isinstance(item, int) and not isinstance(item, bool):
            kept = _integer(item, budget)
            cut = cut or kept is not item
        elif isinstance(item, list | dict) and depth >= MAX_DEPTH:
            kept, cut = f"...[truncated: nested deeper than {MAX_DEPTH} levels]", True
        elif isinstance(item, list):
            room = min(len(item), max(budget.items, 0))
            budget.items -= room
            kept = [None] * room
            pending.extend((item[index], kept, index, depth + 1) for index in reversed(range(room)))
            if room < len(item):
                kept.append(f"...[truncated: {len(item) - room} more items]")
                cut = True
        elif isinstance(item, dict):
            kept, children, shortened = _entries(item, budget, depth + 1)
            cut = cut or shortened
            pending.extend(reversed(children))
        parent[slot] = kept
    return root[0], cut


def _fits(value: Any, budget: Budget) -> bool:
    """Whether ``value`` is within ``budget`` and :data:`MAX_DEPTH`, spending the budget if so: one pass,
    level by level, stopping at the first level past a bound (so an oversized value costs little here)."""
    items = chars = 0
    level = [value]
    for depth in range(MAX_DEPTH + 1):
        below: list[Any] = []
        for item in level:
            kind = type(item)
            if kind is str:
                chars += len(item)
            elif kind is int:
                chars += _digits(item)
            elif kind is list or kind is dict:
                if depth == MAX_DEPTH:
                    return False
                items += len(item)
                if kind is dict:
                    chars += sum(len(key) if type(key) is str else 0 for key in item)
                    below.extend(item.values())
                else:
                    below.extend(item)
            elif kind is not float and kind is not bool and item is not None:
                return False  # not JSON data: the walk below decides what it is kept as
        if items > budget.items or chars > budget.chars:
            return False
        if not below:
            break
        level = below
    budget.items -= items
    budget.chars -= chars
    return True


def _entries(item: dict, budget: Budget, depth: int) -> tuple[dict, list[tuple[Any, Any, Any, int]], bool]:
    """A new object holding the entries of ``item`` that fit (values still to fill in), those values, and
    whether an entry or a key was cut."""
    if not item:
        return {}, [], False
    room = min(len(item), max(budget.items, 0))
    budget.items -= room
    kept: dict[Any, Any] = {}
    children = []
    cut = room < len(item)
    for key, child in list(item.items())[:room]:
        shown = _text(key, budget) if isinstance(key, str) else key
        cut = cut or shown is not key
        if shown not in kept:  # two long keys cut to one text: the later entry is dropped
            kept[shown] = None
            children.append((child, kept, shown, depth))
    if cut and room < len(item):
        kept[f"...[truncated: {len(item) - room} more items]"] = None
    return kept, children, cut


def _text(text: str, budget: Budget) -> str:
    if len(text) <= budget.chars:
        budget.chars -= len(text)
        return text
    room, budget.chars = max(budget.chars, 0), 0
    return f"{text[:room]}...[truncated: {len(text)} characters in all]"


def _digits(number: int) -> int:
    """At least the decimal digits of ``number``, within one (log10(2) ~ 1233 / 4096)."""
    return (max(abs(number).bit_length() - 1, 0) * 1233 >> 12) + 1


def _integer(number: int, budget: Budget) -> int | str:
    digits = _digits(number)
    if digits <= budget.chars:
        budget.chars -= digits
        return number
    budget.chars = 0
    return f"...[truncated: an integer of about {digits} digits]"
