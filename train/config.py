"""The settings of a GRPO run, apart from the trainer so the CLI reads its defaults without importing TRL."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EMBEDDED = "local"
"""``--model local`` (the default): the embedded SmolLM2 GGUF, as ``hopgym eval --model local``."""


@dataclass
class TrainConfig:
    """What ``hopgym train grpo`` runs (each field is one of its options)."""

    out: Path
    env_id: str = "KGTool-v0"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    model: str = EMBEDDED
    limit: int | None = None
    sample: int | None = None
    seed: int = 0
    reward: str = "shaped"
    format_weight: float = 0.2
    call_weights: dict[str, float] = field(default_factory=dict)
    correct_weight: float = 1.0
    num_generations: int = 4
    tasks_per_step: int = 2
    max_completion_length: int = 96
    max_steps: int = 30
    learning_rate: float = 1e-5
    temperature: float = 1.0
    beta: float = 0.0
    save_steps: int = 10
    save_total_limit: int = 2
    call_example: bool = False
    """Show a call of the first offered tool in the system prompt (see ``hopgym.train.rollout``)."""
    train_layers: int | None = None
    """Train only the last N decoder layers and the final norm (None: the whole model). On a CPU the backward
    pass then stops N layers deep: a step costs about half as much with N=6 of SmolLM2's 30."""
    use_vllm: bool = False
    threads: int | None = None
    """torch's CPU threads (None: torch's choice); 1 on a machine busy with other work."""
    progress: bool = True

    def identity(self) -> dict[str, Any]:
        """The settings as JSON data (``run.json``)."""
        return {
            key: str(value) if isinstance(value, Path) else value
            for key, value in dataclasses.asdict(self).items()
        }
