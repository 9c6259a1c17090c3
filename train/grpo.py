"""A GRPO run on an env's tasks: TRL's ``GRPOTrainer`` with hopgym's rollout, rewards and step log.

The output folder holds ``run.json`` (the run's settings), ``training-tasks.json`` (the tasks trained on:
agents/evaluation/training_record.py), ``steps.jsonl`` (:mod:`hopgym.train.steplog`),
``checkpoint-N/`` folders (model, optimizer, scheduler, RNG and trainer state: TRL's own checkpoints) and,
when the run stops, ``reward.png``. ``resume=True`` continues from the last complete checkpoint (one whose
``trainer_state.json``, written last, reads), with the step log cut back to that step: after ``kill -9``
the step count and the log go on as if the run had stopped at that checkpoint.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from hopgym.agents.evaluation.training_record import TrainingStage, training_stages, write_record
from hopgym.errors import ConfigError, DataError
from hopgym.run_folder import exists, read_json, write_json
from hopgym.serving.rollouts import Rollouts, RolloutsFactory, make_env
from hopgym.serving.task_rows import select_tasks
from hopgym.train.config import TrainConfig
from hopgym.train.dataset import task_dataset
from hopgym.train.model import load_model, load_tokenizer
from hopgym.train.rewards import ShapedReward, env_reward, reward_function
from hopgym.train.rollout import HopgymRollout
from hopgym.train.steplog import STEP_LOG, StepLog, read_steps, trim

RUN_FILE = "run.json"
PLOT_FILE = "reward.png"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
RESUMABLE = ("max_steps", "progress", "save_steps", "threads")
"""Settings a resumed run may change; any other must match ``run.json``."""


def last_checkpoint(out: Path) -> Path | None:
    """The newest complete checkpoint in ``out`` (its trainer state, written last, reads), else None."""
    found = []
    for path in out.glob("checkpoint-*"):
        match = _CHECKPOINT.match(path.name)
        if match and path.is_dir():
            try:
                step = (read_json(path / "trainer_state.json") or {})["global_step"]
                found.append((int(step), path))
            except (OSError, DataError, KeyError, TypeError, ValueError):
                continue  # cut short by a kill while saving
    return max(found)[1] if found else None


def check_out(config: TrainConfig, resume: bool) -> Path | None:
    """Refuse a folder that holds a run unless resuming, and a resume with other settings than the run's
    (``RESUMABLE`` ones aside); return the checkpoint a resume starts from (None: from the start)."""
    run_file = config.out / RUN_FILE
    if not resume:
        if exists(run_file):
            raise ConfigError(f"{config.out} holds a run; --resume continues it, or choose another --out")
        return None
    kept = read_json(run_file) if config.out.is_dir() else None
    if kept is None:
        raise ConfigError(f"nothing to resume: {config.out} holds no {RUN_FILE}")
    changed = sorted(k for k, v in config.identity().items() if k not in RESUMABLE and kept.get(k) != v)
    if changed:
        raise ConfigError(f"--resume with other settings than {run_file}: {', '.join(changed)}")
    return last_checkpoint(config.out)


def start_out(config: TrainConfig, checkpoint: Path | None, stages: Sequence[TrainingStage]) -> None:
    """Write the training record (a resume's must name the same tasks) and ``run.json``; for a resume, drop
    the checkpoints a kill cut short (and any past ``checkpoint``) and cut the step log back to
    ``checkpoint``'s step."""
    config.out.mkdir(parents=True, exist_ok=True)
    write_record(config.out, stages)
    resumed_step = _step(checkpoint) if checkpoint else 0
    for path in config.out.glob("checkpoint-*"):
        if path.is_dir() and _step(path) >= resumed_step and path != checkpoint:
            shutil.rmtree(path)
    trim(config.out / STEP_LOG, resumed_step)
    write_json(config.out / RUN_FILE, config.identity())


def _step(checkpoint: Path) -> int:
    match = _CHECKPOINT.match(checkpoint.name)
    return int(match.group(1)) if match else -1


def grpo_args(config: TrainConfig) -> Any:
    """TRL's ``GRPOConfig`` for the run: one generation batch per optimizer step (``tasks_per_step`` tasks,
    ``num_generations`` episodes each), every step logged, checkpoints every ``save_steps``."""
    import torch
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(config.out),
        per_device_train_batch_size=config.tasks_per_step * config.num_generations,
        gradient_accumulation_steps=1,
        num_generations=config.num_generations,
        max_completion_length=config.max_completion_length,
        max_steps=config.max_steps,
        learning_rate=config.learning_rate,
        temperature=config.temperature,
        beta=config.beta,
        seed=config.seed,
        logging_steps=1,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available(),  # TRL's default; on a CPU without bf16 units 10-100x slower
        use_vllm=config.use_vllm,
        vllm_mode="colocate",
        disable_tqdm=not config.progress,
        dataloader_num_workers=0,
        activation_checkpointing=False,  # TRL's default trades time for memory a 135M model does not need
    )


class SaveLastStep(TrainerCallback):
    """Saves a checkpoint at the final step too (the trainer saves every ``save_steps`` only)."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step >= state.max_steps:
            control.should_save = True


def rewards_of(config: TrainConfig) -> dict[str, tuple[Any, float]]:
    """The run's reward functions by name with their weights: the chosen one (weight 1), and the env's
    reward, logged at weight 0 when it is not the one trained on."""
    shaped = ShapedReward(config.format_weight, config.call_weights, config.correct_weight)
    chosen = reward_function(config.reward, shaped)
    rewards = {chosen.__name__: (chosen, 1.0)}
    rewards.setdefault(env_reward.__name__, (env_reward, 0.0))
    return rewards


def train(
    config: TrainConfig, resume: bool = False, make_rollouts: RolloutsFactory = Rollouts
) -> dict[str, Any]:
    """Run (or, with ``resume``, continue) GRPO on the env's tasks; return the last step's log line. The
    episodes play on ``make_rollouts``' envs: in process, or on env servers (``--env-url``)."""
    checkpoint = check_out(config, resume)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is TRL-experimental; pinned
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")  # nothing of a run leaves the machine
    from trl import GRPOTrainer

    if config.tasks_per_step < 1 or config.num_generations < 2:
        raise ConfigError("GRPO needs at least 1 task per step and 2 generations per task")
    if config.threads is not None:
        import torch

        torch.set_num_threads(config.threads)
    tokenizer = load_tokenizer(config.model)
    rewards = rewards_of(config)
    log = StepLog(config.out / STEP_LOG, rewards, group=config.num_generations)
    batch = config.tasks_per_step * config.num_generations
    episodes = make_rollouts(config.env_id, config.env_kwargs, batch)
    first = make_env(config.env_id, config.env_kwargs)
    try:
        dataset = task_dataset(first, select_tasks(first, config.limit, config.sample, config.seed))
        stages = training_stages(
            config.model, "grpo", config.env_id, config.env_kwargs, first, dataset["task_id"]
        )
        rollout = HopgymRollout(
            episodes, tokenizer, on_rollout=log.collect, first_env=first, call_example=config.call_example
        )
    except BaseException:
        first.close()
        episodes.shutdown()
        raise
    trained = {name: function for name, (function, weight) in rewards.items() if weight}
    try:
        start_out(config, checkpoint, stages)
        model = load_model(config.model)
        if config.train_layers is not None:
            freeze_below(model, config.train_layers)
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=list(trained.values()),
            args=grpo_args(config),
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=rollout,
            callbacks=[log, SaveLastStep()],
        )
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finally:
        rollout.close()
        steps = read_steps(config.out / STEP_LOG)
        if steps:
            plot_rewards(steps, config.out / PLOT_FILE)
    return steps[-1] if steps else {}


def freeze_below(model: Any, layers: int) -> None:
    """Leave only the last ``layers`` decoder layers and the final norm trainable (the embeddings, tied to
    the output head in SmolLM2, stay as they are)."""
    decoder = getattr(getattr(model, "model", None), "layers", None)
    if decoder is None or not 1 <= layers <= len(decoder):
        count = len(decoder) if decoder is not None else "no"
        raise ConfigError(
            f"--train-layers must be between 1 and the model's decoder layers ({count}), got {layers}"
        )
    model.requires_grad_(False)
    for module in [*decoder[-layers:], model.model.norm]:
        module.requires_grad_(True)


def plot_rewards(steps: list[dict[str, Any]], path: Path) -> Path:
    """Reward per step (the trained reward's mean, and the env's), with a 10-step running mean."""
    from hopgym.agents.report.plots import line_plot

    numbers = [step["step"] for step in steps]
    trained = [step.get("reward", 0.0) for step in steps]
    series = {"reward (trained on)": trained, "env reward": [step["env_reward"] for step in steps]}
    window = [
        sum(trained[max(0, i - 9) : i + 1]) / len(trained[max(0, i - 9) : i + 1]) for i in range(len(trained))
    ]
    series["reward, mean of last 10 steps"] = window
    return line_plot(
        path, "GRPO reward per step", "step", "mean reward of the step's episodes", numbers, series
    )
