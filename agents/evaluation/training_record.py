"""``training-tasks.json``: which env tasks a trained model saw, so an eval on them is named as such.

``hopgym train sft`` and ``hopgym train grpo`` write it into their output folder: one *stage* per training
command, each with the env id, its keyword arguments, the split it was made with and the ids of the tasks
trained on; a GRPO run started from an SFT folder carries that folder's stages first. ``hopgym eval`` of a
model folder (or a checkpoint in one) reads it, as untrusted input through the run folder's safe readers
(bounded, a regular file, no link followed), and warns, printed and in summary.json / summary.md, naming
how many of the evaluated tasks were trained on (docs/contracts.md "Splits").
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopgym.envs.chat import chat_env
from hopgym.errors import ConfigError, DataError
from hopgym.run_folder import exists, read_json, write_json

TRAINING_RECORD = "training-tasks.json"
FORMAT = 1


@dataclass(frozen=True)
class TrainingStage:
    """One training command's tasks: what an eval's tasks are compared with."""

    command: str
    env: str
    env_kwargs: Mapping[str, Any]
    split: str | None
    split_by: str | None
    task_ids: tuple[str, ...]

    def to_record(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "env": self.env,
            "env_kwargs": dict(self.env_kwargs),
            "split": self.split,
            "split_by": self.split_by,
            "task_ids": list(self.task_ids),
        }


def record_path(model: str | Path) -> Path | None:
    """The training record of a model given as a folder: the folder's own, else its parent's (a checkpoint
    of a run folder); None when ``model`` is no folder or neither holds one."""
    folder = Path(model).absolute()
    if not folder.is_dir():
        return None
    candidates = (folder / TRAINING_RECORD, folder.parent / TRAINING_RECORD)
    return next((path for path in candidates if exists(path)), None)


def read_stages(path: Path) -> tuple[TrainingStage, ...]:
    """The stages of a training record; :class:`DataError` naming the file and what is wrong with it."""
    record = read_json(path)
    if record is None:
        raise DataError(f"{path}: no such training record")
    stages = record.get("stages")
    if record.get("format") != FORMAT or not isinstance(stages, list):
        raise DataError(f"{path}: not a training record (format {FORMAT} with a list of 'stages')")
    return tuple(_stage(stage, f"{path}: stages[{number}]") for number, stage in enumerate(stages))


def _stage(stage: Any, where: str) -> TrainingStage:
    if not isinstance(stage, dict):
        raise DataError(f"{where}: a stage must be an object, got {type(stage).__name__}")
    strings = {key: stage.get(key) for key in ("command", "env")}
    optional = {key: stage.get(key) for key in ("split", "split_by")}
    task_ids, env_kwargs = stage.get("task_ids"), stage.get("env_kwargs", {})
    bad = [key for key, value in strings.items() if not isinstance(value, str)]
    bad += [key for key, value in optional.items() if value is not None and not isinstance(value, str)]
    if not (isinstance(task_ids, list) and all(isinstance(task_id, str) for task_id in task_ids)):
        bad.append("task_ids")
    if not isinstance(env_kwargs, dict):
        bad.append("env_kwargs")
    if bad:
        raise DataError(f"{where}: {', '.join(bad)} missing or of the wrong type")
    return TrainingStage(
        stage["command"], stage["env"], env_kwargs, optional["split"], optional["split_by"],
        tuple(stage["task_ids"]),
    )  # fmt: skip


def training_stages(
    model: str, command: str, env_id: str, env_kwargs: Mapping[str, Any], env: Any, task_ids: Sequence[str]
) -> tuple[TrainingStage, ...]:
    """The stages a run writes: those of the model it starts from (a trained folder's record), then its
    own: ``command`` on ``env`` (made from ``env_id`` and ``env_kwargs``; its split as it holds it) over
    ``task_ids``."""
    inner = chat_env(env)
    own = TrainingStage(command, env_id, env_kwargs, inner.split, inner.split_by, tuple(task_ids))
    return (*model_stages(model), own)


def model_stages(model: str | Path) -> tuple[TrainingStage, ...]:
    """The stages of the training record of ``model`` (a folder, or a checkpoint in one: see
    :func:`record_path`); none for a model without one."""
    path = record_path(model)
    return read_stages(path) if path is not None else ()


def write_record(out: Path, stages: Sequence[TrainingStage]) -> None:
    """Write ``out``'s training record (replaced whole, never through a link). A folder that already
    holds one, a resumed run's, must hold these very stages: a resume that would train on other tasks is a
    :class:`ConfigError`, so the record always names what the weights saw."""
    path = out / TRAINING_RECORD
    if exists(path) and read_stages(path) != tuple(stages):
        raise ConfigError(f"{path} names other training tasks than this run's; choose another --out")
    write_json(path, {"format": FORMAT, "stages": [stage.to_record() for stage in stages]})


def overlap_warning(stages: Sequence[TrainingStage], env_id: str, task_ids: Collection[str]) -> str | None:
    """The warning for an eval of ``env_id``'s ``task_ids`` by a model trained on ``stages``, naming how
    many of them it was trained on; None when it saw none of them."""
    name = env_id.removeprefix("hopgym:")
    same_env = [stage for stage in stages if stage.env.removeprefix("hopgym:") == name]
    trained = {task_id for stage in same_env for task_id in stage.task_ids}
    overlap = len(set(task_ids) & trained)
    if not overlap:
        return None
    return (
        f"{overlap} of the {len(set(task_ids))} evaluated {name} task(s) are tasks the model was trained on "
        f"(its {TRAINING_RECORD}); scores on them are no held-out result"
    )
