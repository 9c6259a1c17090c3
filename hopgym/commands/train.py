"""``hopgym train grpo``: GRPO with TRL on an env's tasks, rewards from the env (needs ``hopgym[train]``)."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from hopgym.commands import add_actions
from hopgym.commands.env_arguments import (
    add_env_arguments,
    add_env_url_argument,
    env_kwargs_from,
    parse_key_values,
)
from hopgym.commands.model_arguments import model_argument
from hopgym.commands.serve import env_rollouts
from hopgym.errors import ConfigError
from hopgym.train.config import EMBEDDED, TrainConfig

INSTALL_HINT = "pip install 'hopgym[train]'"


def register(subparsers: argparse._SubParsersAction) -> None:
    defaults = TrainConfig(out=Path("."))
    actions = add_actions(subparsers, "train", "train a model on an env's rewards (GRPO with TRL)")
    grpo = actions.add_parser(
        "grpo",
        help="GRPO: each completion is an env episode; its calls run in the sandbox",
        description="Trains MODEL with GRPO (TRL) on an env's rewards: each sampled completion is played as "
        "an episode whose tool calls run in the sandbox. Writes OUT/run.json, OUT/steps.jsonl (one line per "
        "step: reward, loss, call statuses, episodes), OUT/checkpoint-N/ and OUT/reward.png. On a GPU, "
        "--vllm generates with TRL's vLLM. Example (after train sft --out runs/sft): "
        "hopgym train grpo --model runs/sft --env KGTool-v0 --max-steps 30 --out runs/train",
    )
    add_env_arguments(grpo, default_env=defaults.env_id)
    add_env_url_argument(grpo)
    grpo.add_argument("--limit", type=int, help="train on the first N tasks")
    grpo.add_argument("--sample", type=int, metavar="N", help="train on N tasks drawn stratified (as eval)")
    grpo.add_argument("--seed", type=int, default=defaults.seed, help="seed of --sample and of the trainer")
    grpo.add_argument(
        "--reward", choices=("shaped", "env"), default=defaults.reward, help="reward trained on"
    )
    grpo.add_argument(
        "--format-weight", type=float, default=defaults.format_weight, help="shaped: format term"
    )
    grpo.add_argument(
        "--call-weight",
        action="append",
        metavar="STATUS=W",
        help="shaped: weight of a call status (e.g. ok=0.5, tool_hallucination=-0.5); repeatable",
    )
    grpo.add_argument(
        "--correct-weight", type=float, default=defaults.correct_weight, help="shaped: env-reward term"
    )
    grpo.add_argument(
        "--num-generations", type=int, default=defaults.num_generations, help="episodes per task"
    )
    grpo.add_argument("--tasks-per-step", type=int, default=defaults.tasks_per_step, help="tasks per step")
    grpo.add_argument(
        "--max-completion-length",
        type=int,
        default=defaults.max_completion_length,
        help="tokens of an episode's completion, tool results included",
    )
    grpo.add_argument("--max-steps", type=int, default=defaults.max_steps, help="optimizer steps")
    grpo.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    grpo.add_argument("--temperature", type=float, default=defaults.temperature)
    grpo.add_argument(
        "--beta", type=float, default=defaults.beta, help="KL coefficient (0: no reference model)"
    )
    grpo.add_argument("--save-steps", type=int, default=defaults.save_steps, help="checkpoint every N steps")
    grpo.add_argument("--save-total-limit", type=int, default=defaults.save_total_limit)
    grpo.add_argument(
        "--call-example",
        action="store_true",
        help="show a call of the first offered tool in the system prompt",
    )
    grpo.add_argument("--vllm", action="store_true", help="generate with vLLM (GPU; colocated with training)")
    add_training_arguments(grpo, out="output folder")
    grpo.add_argument("--resume", action="store_true", help="continue OUT from its last checkpoint")
    grpo.set_defaults(func=run_grpo)

    sft = actions.add_parser(
        "sft",
        help="a supervised warm start on the env's gold solution paths, played and verified in the env",
        description="Writes OUT, a model folder (weights, tokenizer, sft.json) for `train grpo --model OUT`; "
        "needs an env whose tasks carry a gold solution path (KGTool-v0).",
    )
    add_env_arguments(sft, default_env=defaults.env_id)
    sft.add_argument("--limit", type=int, help="demonstrations from the first N tasks")
    sft.add_argument("--epochs", type=float, default=1.0)
    sft.add_argument("--learning-rate", type=float, default=5e-5)
    sft.add_argument("--batch-size", type=int, default=4)
    add_training_arguments(sft, out="the model folder to write")
    sft.set_defaults(func=run_sft)


def add_training_arguments(parser: argparse.ArgumentParser, out: str) -> None:
    """The options every training command takes: the model, what of it trains, threads, output, progress."""
    parser.add_argument(
        "--model",
        type=model_argument,
        default=EMBEDDED,
        help="a model folder, a hub id, a .gguf file, or 'local': the embedded SmolLM2-135M GGUF (default)",
    )
    parser.add_argument(
        "--train-layers", type=int, metavar="N", help="train only the last N decoder layers (default: all)"
    )
    parser.add_argument(
        "--threads", type=int, help="torch CPU threads (default: torch's; 1 is faster on a busy machine)"
    )
    parser.add_argument("--out", type=Path, required=True, help=out)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def config_from(args: argparse.Namespace) -> TrainConfig:
    weights = parse_key_values(args.call_weight, "--call-weight")
    if not all(isinstance(value, (int, float)) for value in weights.values()):
        raise ConfigError(f"--call-weight values must be numbers, got {weights}")
    return TrainConfig(
        out=args.out,
        env_id=args.env,
        env_kwargs=env_kwargs_from(args),
        model=args.model,
        limit=args.limit,
        sample=args.sample,
        seed=args.seed,
        reward=args.reward,
        format_weight=args.format_weight,
        call_weights={key: float(value) for key, value in weights.items()},
        correct_weight=args.correct_weight,
        num_generations=args.num_generations,
        tasks_per_step=args.tasks_per_step,
        max_completion_length=args.max_completion_length,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        temperature=args.temperature,
        beta=args.beta,
        save_steps=args.save_steps,
        save_total_limit=args.save_total_limit,
        call_example=args.call_example,
        train_layers=args.train_layers,
        use_vllm=args.vllm,
        threads=args.threads,
        progress=not args.no_progress,
    )


def check_installed() -> None:
    missing = [name for name in ("trl", "datasets", "gguf") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"hopgym train needs {', '.join(missing)}: {INSTALL_HINT}")


def run_grpo(args: argparse.Namespace) -> int:
    check_installed()
    from hopgym.train.grpo import train

    last = train(config_from(args), resume=args.resume, make_rollouts=env_rollouts(args))
    summary = {key: last.get(key) for key in ("step", "loss", "reward", "env_reward", "statuses")}
    print(json.dumps(summary))
    return 0


def run_sft(args: argparse.Namespace) -> int:
    check_installed()
    from hopgym.train.sft import warm_start

    figures = warm_start(
        args.env,
        env_kwargs_from(args),
        args.out,
        model=args.model,
        limit=args.limit,
        epochs=args.epochs,
        learning_rate=args.learning_rate,
        batch_size=args.batch_size,
        train_layers=args.train_layers,
        threads=args.threads,
        progress=not args.no_progress,
    )
    print(json.dumps(figures))
    return 0
