"""An env's ``split`` and ``split_by`` options: which side of its declared train / held-out rule an env's
tasks come from (docs/contracts.md "Splits"). The rules themselves are the tasks layer's pure functions
(tasks/splits.py); an env declares the ones it supports in ``split_rules``, its default first."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from hopgym.errors import ConfigError
from hopgym.options import check_choice
from hopgym.tasks.splits import SPLITS, Split

T = TypeVar("T")


def check_split(split: object, split_by: object, rules: Sequence[str]) -> tuple[Split | None, str]:
    """The checked ``(split, rule)``: ``split`` is None (every task) or one of :data:`SPLITS`; ``split_by``
    is None (the env's default rule, ``rules[0]``) or one of ``rules``; anything else is a
    :class:`ConfigError` naming the valid values."""
    if not rules:
        raise ConfigError("this env declares no train / held-out split rule")
    rule = check_choice("split_by", rules[0] if split_by is None else split_by, tuple(rules))
    if split is None:
        return None, rule
    return check_choice("split", split, SPLITS), rule


def split_tasks(
    tasks: Sequence[T], split: Split, rule: str, side: Callable[[T], Split | None], where: str
) -> list[T]:
    """The tasks on ``split``'s side (a task in neither, e.g. with anchors on both sides, is left out);
    :class:`ConfigError` naming ``where`` the tasks come from when none is."""
    kept = [task for task in tasks if side(task) == split]
    if not kept:
        raise ConfigError(f"split={split!r} by {rule} keeps none of the {len(tasks)} task(s) of {where}")
    return kept
