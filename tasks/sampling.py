"""A stratified sample of an env's tasks: N tasks spread over hop counts, patterns and domains in
proportion to the data, not its first N rows (which in a sorted file are all alike)."""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from typing import Any

from hopgym.errors import ConfigError

STRATUM_FIELDS = ("hops", "pattern", "domain", "variant")
"""Task attributes that define a stratum, where a task has them (ToolHop: hops and domain; KG2Tool:
pattern; FamilyTool: hops and variant)."""


def task_stratum(task: Any) -> tuple[Any, ...]:
    """The stratum of a task: its values of :data:`STRATUM_FIELDS` (None where it has no such field)."""
    return tuple(getattr(task, name, None) for name in STRATUM_FIELDS)


def stratified_sample(strata: Sequence[Hashable], size: int, seed: int) -> list[int]:
    """Indices (ascending) of ``size`` items drawn without replacement so that each stratum's share is
    its share of the data, rounded by largest remainder (ties broken by ``seed``); the items within a
    stratum are drawn at random with ``seed``. The same inputs always give the same sample."""
    if not 1 <= size <= len(strata):
        raise ConfigError(f"--sample must be between 1 and the number of tasks ({len(strata)}), got {size}")
    rng = random.Random(seed)
    members: dict[Hashable, list[int]] = {}
    for index, stratum in enumerate(strata):
        members.setdefault(stratum, []).append(index)
    quotas = {stratum: size * len(items) / len(strata) for stratum, items in members.items()}
    counts = {stratum: int(quota) for stratum, quota in quotas.items()}
    order = list(members)
    rng.shuffle(order)  # ties in the remainder go to a seeded, not a data-order, stratum
    order.sort(key=lambda stratum: quotas[stratum] - counts[stratum], reverse=True)
    for stratum in order[: size - sum(counts.values())]:
        counts[stratum] += 1
    chosen = [index for stratum, items in members.items() for index in rng.sample(items, counts[stratum])]
    return sorted(chosen)
