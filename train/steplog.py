"""The run's per-step log, ``steps.jsonl``: one JSON line per optimizer step, written as the step ends.

A line holds what TRL logged for the step (``loss``, ``reward``, ``reward_std``, ``learning_rate``,
``grad_norm``), each reward function's value per episode, every episode's turns with the env's call records
(status, arguments, feedback cut to :data:`FEEDBACK_CHARS`, sandbox latency), the step's call statuses
counted, the fraction of turns that parsed as tool calls, the mean reward standard deviation within a
group, and where the step's wall time went (generation, env, the rest: forward, backward, optimizer). With
env servers (``--env-url``) each episode names the ``server`` that played it and those that cut it off.

Each line is one ``write`` followed by ``fsync``, before the step's checkpoint is saved (the trainer logs,
then saves). After a crash the log may hold steps past the last checkpoint, and a torn last line:
:func:`trim` cuts it back to the checkpoint's step, so a resumed run writes each step once.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from hopgym.run_folder import json_bytes, open_append, read_records, replace_file
from hopgym.train.rollout import TrainEpisode

STEP_LOG = "steps.jsonl"
FEEDBACK_CHARS = 2000
"""Characters of a call's feedback kept in the log (a KG tool may return megabytes); ``feedback_chars``
gives the full length."""
TRL_KEYS = ("loss", "reward", "reward_std", "learning_rate", "grad_norm", "entropy", "epoch")


def _logged_call(call: Mapping[str, Any]) -> dict[str, Any]:
    feedback = str(call.get("feedback", ""))
    kept = {key: value for key, value in call.items() if key != "feedback"}
    return {**kept, "feedback": feedback[:FEEDBACK_CHARS], "feedback_chars": len(feedback)}


def episode_entry(record: TrainEpisode, rewards: Mapping[str, float]) -> dict[str, Any]:
    """One episode as the log holds it: the record, its call feedback cut, and each reward's value."""
    turns = [{**turn, "calls": [_logged_call(call) for call in turn["calls"]]} for turn in record["turns"]]
    return {**record, "turns": turns, "rewards": dict(rewards)}


def step_summary(records: Sequence[TrainEpisode], totals: Sequence[float], group: int) -> dict[str, Any]:
    """Counts over a step's episodes: call statuses, parsed and well-formed turns, reward spread per group
    (``group`` consecutive episodes share a prompt, as TRL's sampler orders them)."""
    turns = [turn for record in records for turn in record["turns"]]
    statuses = Counter(call["status"] for turn in turns for call in turn["calls"])
    groups = [totals[i : i + group] for i in range(0, len(totals), group)]
    spreads = [statistics.pstdev(values) for values in groups if len(values) > 1]
    return {
        "turns": len(turns),
        "statuses": dict(sorted(statuses.items())),
        "parsed_calls": sum(isinstance(turn["action"], dict) for turn in turns) / len(turns)
        if turns
        else 0.0,
        "well_formed": sum(turn["well_formed"] for turn in turns) / len(turns) if turns else 0.0,
        "env_reward": statistics.fmean(r["reward"] for r in records) if records else 0.0,
        "group_reward_std": statistics.fmean(spreads) if spreads else 0.0,
    }


class StepLog(TrainerCallback):
    """Writes ``steps.jsonl`` (see the module docstring). ``rewards`` are the run's reward functions by name
    with their weights; :meth:`collect` is the rollout's ``on_rollout``."""

    def __init__(
        self, path: Path, rewards: Mapping[str, tuple[Callable[..., list[float]], float]], group: int
    ):
        self.path = path
        self.rewards = dict(rewards)
        self.group = group
        self._records: list[TrainEpisode] = []
        self._generation_seconds = 0.0
        self._step_started = 0.0
        self._step_seconds = 0.0

    def collect(self, records: list[TrainEpisode], generation_seconds: float) -> None:
        self._records += records
        self._generation_seconds += generation_seconds

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step_started = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step_seconds = time.perf_counter() - self._step_started

    def on_log(
        self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if not logs or "loss" not in logs or not state.is_world_process_zero:
            return  # the end-of-training summary, or an evaluation: no step of its own
        records, self._records = self._records, []
        values = {name: function(hopgym=records) for name, (function, _) in self.rewards.items()}
        totals = [
            sum(weight * values[name][i] for name, (_, weight) in self.rewards.items())
            for i in range(len(records))
        ]
        env_seconds = sum(record["env_seconds"] for record in records)
        line = {
            "step": state.global_step,
            **{key: logs[key] for key in TRL_KEYS if key in logs},
            **step_summary(records, totals, self.group),
            "seconds": {
                "step": self._step_seconds,
                "generation": self._generation_seconds,
                "env": env_seconds,
                "train": max(0.0, self._step_seconds - self._generation_seconds - env_seconds),
            },
            "episodes": [
                episode_entry(record, {name: values[name][i] for name in values} | {"total": totals[i]})
                for i, record in enumerate(records)
            ],
        }
        self._generation_seconds = 0.0
        append_line(self.path, line)


def append_line(path: Path, value: Mapping[str, Any]) -> None:
    """Append one JSON line in one write (never through a link), synced to disk before returning."""
    with open_append(path) as handle:
        handle.write(json_bytes(value) + b"\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_steps(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a step log (a torn last line, left by a kill, is not a step), read as a run
    folder's records file: bounded, never through a link, a malformed line skipped."""
    return read_records(path, _step_problem).records


def _step_problem(line: dict[str, Any]) -> str | None:
    return None if isinstance(line.get("step"), int) else "no step number"


def trim(path: Path, last_step: int) -> list[dict[str, Any]]:
    """Cut the log back to the steps up to ``last_step`` (the checkpoint a run resumes from), replacing the
    file atomically; return the steps kept."""
    kept = [step for step in read_steps(path) if step["step"] <= last_step]
    replace_file(path, [json_bytes(step) + b"\n" for step in kept])
    return kept
