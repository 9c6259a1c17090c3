"""``hopgym eval``: run an agent and a model over an env's tasks and write the paper-style tables."""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hopgym.commands.env_arguments import add_env_arguments, env_kwargs_from, parse_key_values

if TYPE_CHECKING:
    from hopgym.agents.evaluation.runner import EvalConfig

DEFAULT_CONCURRENCY = 8


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="evaluate an agent and a model on an env's tasks",
        description="Runs episodes concurrently, appends one JSON line per finished episode to "
        "OUT/episodes.jsonl, and writes OUT/summary.json and OUT/summary.md.",
    )
    add_env_arguments(parser)
    parser.add_argument("--agent", default="fc", help="fc | react | codeact | direct | kgetool (default: fc)")
    parser.add_argument(
        "--model",
        required=True,
        help="litellm provider string (e.g. hosted_vllm/Qwen/Qwen2.5-7B-Instruct, openai/gpt-4o), "
        "or 'local' to start the embedded SmolLM2 server",
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
    parser.set_defaults(func=run)


def model_extra_from(args: argparse.Namespace) -> dict[str, Any]:
    """The request fields beyond temperature and max tokens: ``--model-arg`` plus ``--top-p`` and
    ``--model-seed``."""
    extra = parse_key_values(args.model_arg, "--model-arg")
    for key, value in (("top_p", args.top_p), ("seed", args.model_seed)):
        if value is not None:
            extra[key] = value
    return extra


def max_reply_bytes(args: argparse.Namespace) -> int:
    """``--max-reply-bytes``, else the model client's default."""
    from hopgym.agents.model.client import DEFAULT_MAX_REPLY_BYTES

    return DEFAULT_MAX_REPLY_BYTES if args.max_reply_bytes is None else args.max_reply_bytes


def _default_out(args: argparse.Namespace) -> Path:
    parts = [args.env, args.agent, args.model, args.scenario]
    return Path("runs") / re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(p for p in parts if p))


def api_base_from(bases: Sequence[str] | None) -> str | tuple[str, ...] | None:
    """``--api-base`` given once, several times (replicas of one model), or not at all."""
    if not bases:
        return None
    return bases[0] if len(bases) == 1 else tuple(bases)


def model_endpoint(args: argparse.Namespace) -> contextlib.AbstractContextManager[dict[str, Any]]:
    """ModelConfig fields of ``--model`` and its server (agents/model/endpoint.py); ``local`` runs the
    embedded server meanwhile."""
    from hopgym.agents.model.endpoint import model_endpoint as endpoint

    executor = getattr(args, "executor", "local")
    return endpoint(
        args.model, api_base_from(args.api_base), args.api_key, args.max_tokens, args.timeout, executor
    )


def concurrency_of(args: argparse.Namespace, default: int = DEFAULT_CONCURRENCY) -> int:
    """``--concurrency``, else ``default``, or for the local model ``LOCAL_CONCURRENCY`` (its one llama
    context serves one conversation well; concurrent ones evict each other's prompt cache)."""
    if args.concurrency is not None:
        return args.concurrency
    if args.model == "local":
        from hopgym.agents.model.local_server import LOCAL_CONCURRENCY

        return LOCAL_CONCURRENCY
    return default


def eval_config(args: argparse.Namespace, endpoint: dict[str, Any], out: Path, agent: str) -> EvalConfig:
    """The run ``hopgym eval``'s options ask for (``hopgym ablate`` builds each arm's from the same)."""
    from hopgym.agents.evaluation.runner import EvalConfig
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
    )


def run(args: argparse.Namespace) -> int:
    from hopgym.agents.evaluation.records import EPISODES_FILE, read_episodes
    from hopgym.agents.evaluation.runner import EvalRun, run_verdict
    from hopgym.agents.evaluation.summary import markdown_table, run_title
    from hopgym.agents.evaluation.tracking import Tracker, log_run
    from hopgym.agents.report.familytool_tables import familytool_tables_for_run

    trackers = [Tracker.parse(spec) for spec in args.track]
    for tracker in trackers:  # before the run: a missing library must not cost the run
        tracker.check_installed()
    with model_endpoint(args) as endpoint:
        config = eval_config(args, endpoint, Path(args.out) if args.out else _default_out(args), args.agent)
        summary = EvalRun(config).run()
    print(f"\n{run_title(summary)}  ({config.out})\n")
    print(markdown_table({config.agent: summary}))
    tables = familytool_tables_for_run(config.out)  # the paper's Tables 3 and 4/5 for FamilyTool runs
    if tables:
        print(f"\n{tables}")
    for line in log_run(config.out, trackers):
        print(line)
    status, verdict = run_verdict(read_episodes(config.out / EPISODES_FILE))
    if verdict is not None:
        print(f"hopgym: {'error: ' if status else ''}{verdict}", file=sys.stderr)
    return status
