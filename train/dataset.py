"""An env's tasks as the ``datasets.Dataset`` TRL reads: one :func:`~hopgym.serving.task_rows.trl_row` per
task (its columns: ``prompt``, ``task_id``, ``index``, ``tools``), the rows the verifiers adapter writes in
its own format from the same task starts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from hopgym.errors import ConfigError
from hopgym.moved import moved_names
from hopgym.serving.task_rows import task_starts, trl_row

if not TYPE_CHECKING:  # the type checker flags an old path (and keeps checking every other name)
    __getattr__ = moved_names(__name__)  # names that moved to hopgym.serving.task_rows still import


def task_dataset(env: gym.Env, indices: Sequence[int]) -> Any:
    """The tasks at ``indices`` as a ``datasets.Dataset`` of TRL rows."""
    from datasets import Dataset

    rows = [trl_row(start) for start in task_starts(env, indices)]
    if not rows:
        raise ConfigError("no task selected to train on")
    # Every message gets every key in Arrow (a struct column); None where a message had none.
    return Dataset.from_list(rows)
