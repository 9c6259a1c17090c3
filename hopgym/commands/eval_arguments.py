"""The options of ``hopgym eval`` and the run they ask for, shared with ``hopgym ablate`` (whose every
ablation takes them, so the two cannot drift apart)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hopgym.commands.env_arguments import (
    add_env_arguments,
    add_env_url_argument,
    env_kwargs_from,
    parse_key_values,
)
from hopgym.commands.model_arguments import concurrency_of, max_reply_bytes, model_argument, model_extra_from
from hopgym.commands.serve import env_rollouts

if TYPE_CHECKING:
    from hopgym.agents.evaluation.episode_runner import EvalConfig


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """Every option of ``hopgym eval`` (read back by :func:`eval_config`)."""
    add_env_arguments(parser)
    add_env_url_argument(parser)
    parser.add_argument("--agent", default="fc", help="fc | react | codeact | direct | kgetool (default: fc)")
    parser.add_argument(
        "--model",
        type=model_argument,
        required=True,
        help="litellm provider string (e.g. hosted_vllm/Qwen/Qwen2.5-7B-Instruct, openai/gpt-4o), "
        "'local' to start the embedded SmolLM2 server, or an existing folder to serve a trained model on "
        "CPU, read as training reads it: a model folder (config.json and a tokenizer: what 'train sft' "
        "writes, or a 'checkpoint-N' inside a train folder) or a 'train grpo' folder (its newest "
        "checkpoint-N: its final model); with --api-base a folder names the model that server serves "
        "(e.g. vLLM serving the checkpoint), and its training record still applies",
    )
    parser.add_argument(
        "--api-base",
        action="append",
        help="base URL of the model server; repeat for replicas of one model (requests are balanced, a "
        "failing server is left out for a while)",
    )
    parser.add_argument("--api-key", help="API key for the model server")
    parser.add_argument("--agent-arg", action="append", metavar="KEY=VALUE", help="an agent option")
    parser.add_argument(
        "--concurrency",
        type=int,
        help="episodes run at once, per node with ray (default: 8; 1 for the local model)",
    )
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="where episodes run: this process, or a Ray cluster's nodes (needs hopgym[ray])",
    )
    parser.add_argument(
        "--ray-address", help="the Ray cluster to join (default: RAY_ADDRESS, else a new local instance)"
    )
    parser.add_argument("--limit", type=int, help="run only the first N tasks")
    parser.add_argument(
        "--sample", type=int, metavar="N", help="run N tasks drawn stratified over hops / patterns / domains"
    )
    parser.add_argument(
        "--task", action="append", default=[], metavar="ID", help="run only this task (repeatable, in order)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of --sample and of each episode (default: 0)"
    )
    parser.add_argument(
        "--samples", type=int, default=1, metavar="K", help="episodes per task, for pass@k (default: 1)"
    )
    parser.add_argument("--resume", action="store_true", help="continue OUT, skipping finished episodes")
    parser.add_argument(
        "--retry-errors",
        action="store_true",
        help="with --resume: run again the episodes that ended with an error (their records are replaced)",
    )
    parser.add_argument("--out", help="run folder (default: runs/ENV-AGENT-MODEL[-SCENARIO])")
    parser.add_argument(
        "--temperature", type=float, help="sampling temperature (default: the protocol's, else 0)"
    )
    parser.add_argument(
        "--max-tokens", type=int, help="cap on each reply's tokens (default: the protocol's, e.g. 256)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        help="seconds one model request may take in all, its whole reply read (default: 120; 600 for the "
        "local model); a failed request is retried up to --max-retries times",
    )
    parser.add_argument(
        "--max-reply-bytes",
        type=int,
        help="the most bytes read of one model reply; a larger one ends its episode (default: 4 MiB)",
    )
    parser.add_argument("--max-retries", type=int, default=4, help="retries of a failed model request")
    parser.add_argument("--top-p", type=float, help="nucleus sampling threshold sent to the model")
    parser.add_argument(
        "--model-seed", type=int, help="the model's sampling seed (sample k of a task is sent SEED+k)"
    )
    parser.add_argument(
        "--model-arg",
        action="append",
        metavar="KEY=VALUE",
        help="any other request field, e.g. extra_body='{\"top_k\": 20}' (litellm keyword arguments)",
    )
    parser.add_argument(
        "--track",
        action="append",
        default=[],
        metavar="TRACKER[:TARGET]",
        help="log config, per-episode metrics and summary when the run ends (repeatable): mlflow[:URI] "
        "(default: $MLFLOW_TRACKING_URI, else the file store ./mlruns) or wandb[:PROJECT] (offline unless "
        "WANDB_MODE says otherwise); needs the tracking extra",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def eval_config(args: argparse.Namespace, endpoint: dict[str, Any], out: Path, agent: str) -> EvalConfig:
    """The run ``hopgym eval``'s options ask for (``hopgym ablate`` builds each arm's from the same)."""
    from hopgym.agents.evaluation.episode_runner import EvalConfig
    from hopgym.agents.evaluation.training_record import model_stages
    from hopgym.agents.model.client import ModelConfig

    return EvalConfig(
        out=out,
        model=ModelConfig(
            **endpoint,
            temperature=args.temperature,
            max_retries=args.max_retries,
            max_reply_bytes=max_reply_bytes(args),
            extra=model_extra_from(args),
        ),
        env_id=args.env,
        env_kwargs=env_kwargs_from(args),
        agent=agent,
        agent_options=parse_key_values(args.agent_arg, "--agent-arg"),
        concurrency=concurrency_of(args),
        limit=args.limit,
        sample=args.sample,
        task_ids=tuple(args.task),
        seed=args.seed,
        samples=args.samples,
        resume=args.resume,
        retry_errors=args.retry_errors,
        progress=not args.no_progress,
        executor=args.executor,
        ray_address=args.ray_address,
        training=model_stages(args.model),
        make_rollouts=env_rollouts(args),
    )
