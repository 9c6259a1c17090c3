"""Which model a ``--model`` folder names: a transformers model folder, or a ``hopgym train`` output.

``hopgym train sft`` saves its model and tokenizer in its output folder; ``hopgym train grpo`` saves TRL
checkpoints, ``checkpoint-N/`` (model, tokenizer, optimizer state), and the last one is its final model.
So a folder holding ``config.json`` and a tokenizer is that model (an SFT output, a ``checkpoint-N``, a
downloaded model); a folder without them that holds ``checkpoint-N`` folders means its newest complete one.
"""

from __future__ import annotations

import re
from pathlib import Path

from hopgym.errors import ConfigError

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def is_model_folder(path: Path) -> bool:
    """True when ``path`` holds a transformers model: its config and a tokenizer."""
    return (path / "config.json").is_file() and any((path / name).is_file() for name in TOKENIZER_FILES)


def checkpoint_model(folder: Path) -> Path:
    """The model folder ``folder`` names (see the module docstring), or ConfigError saying what it lacks."""
    if is_model_folder(folder):
        return folder
    checkpoints = sorted(
        (int(match.group(1)), path)
        for path in folder.iterdir()
        if path.is_dir() and (match := _CHECKPOINT.match(path.name)) and is_model_folder(path)
    )
    if checkpoints:
        return checkpoints[-1][1]
    raise ConfigError(
        f"--model {folder} is a folder but no model: it needs config.json and a tokenizer "
        f"({' or '.join(TOKENIZER_FILES)}), as hopgym train sft writes, or checkpoint-N folders holding "
        "them, as hopgym train grpo writes"
    )
