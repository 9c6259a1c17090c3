"""Train / held-out splits of tasks by a fixed rule: a key (an entity, a relation, a task id) is held out
when its sha256 falls in the first :data:`HELDOUT_FRACTION` of the hash space.

A pure function of the key, never of a seed, a machine or Python's salted ``hash()``: a sampled task set and
a file of the same tasks get the same verdict, on every machine, in every run (docs/contracts.md "Splits").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Literal, get_args

Split = Literal["train", "heldout"]
SPLITS: tuple[Split, ...] = get_args(Split)
HELDOUT_FRACTION = 0.2
"""The share of keys held out (about: each key's side is its hash's, not a count)."""
_SPACE = 2**64


def key_side(key: str) -> Split:
    """``heldout`` when sha256(``key``)'s first 8 bytes, as a fraction of 2**64, are below
    :data:`HELDOUT_FRACTION`; else ``train``."""
    value = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")
    return "heldout" if value < HELDOUT_FRACTION * _SPACE else "train"


def keys_side(keys: Iterable[str]) -> Split | None:
    """The side of a task that names every key of ``keys``: ``train`` or ``heldout`` when all keys are on
    it, None when they are mixed (the task is in neither split) or there are none."""
    sides = {key_side(key) for key in keys}
    return sides.pop() if len(sides) == 1 else None
