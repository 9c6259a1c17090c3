"""``hopgym demo``: a scripted policy (agents/policies/scripted.py) over the real ToolHop data through the
real sandbox. The summary has the paper's Table 4 columns for this policy.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import gymnasium as gym
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hopgym.agents.policies.scripted import run_episode
from hopgym.envs.calls import INVOCATION_ERROR_TYPES
from hopgym.envs.chat import chat_env
from hopgym.envs.toolhop.metrics import table4_metrics


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}"


def summary_table(metrics: dict[str, Any], statuses: Counter[str], title: str) -> Table:
    table = Table(title=title)
    table.add_column("Metric")
    table.add_column("Query (%)", justify="right")
    table.add_column("Instance (%)", justify="right")
    table.add_row("Answer correctness", _percent(metrics["answer_correctness"]), "")
    table.add_row(
        "Invocation error",
        _percent(metrics["invocation_error_query"]),
        _percent(metrics["invocation_error_instance"]),
    )
    for error_type in INVOCATION_ERROR_TYPES:
        label = "  " + error_type.replace("_", " ")
        table.add_row(
            label, _percent(metrics[f"{error_type}_query"]), _percent(metrics[f"{error_type}_instance"])
        )
    table.caption = f"{metrics['episodes']} episodes, {metrics['calls']} calls; call statuses: " + ", ".join(
        f"{status} {count}" for status, count in sorted(statuses.items())
    )
    return table


def run(args: argparse.Namespace) -> int:
    console = Console()
    env = gym.make(
        "ToolHop-v0",
        data_path=args.data,
        scenario="mandatory",
        feedback=args.feedback,
        sandbox=args.sandbox,
    )
    try:
        count = len(chat_env(env).tasks) if args.limit is None else min(args.limit, len(chat_env(env).tasks))
        records = []
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            bar = progress.add_task("ToolHop episodes", total=count)
            for index in range(count):
                records.append(run_episode(env, index))
                progress.advance(bar)
        sandbox = chat_env(env).sandbox
        assert sandbox is not None  # the env makes its sandbox when made and drops it in close()
        isolation = sandbox.isolation
    finally:
        env.close()
    statuses = Counter(call["status"] for record in records for call in record["calls"])
    title = f"ToolHop-v0, scripted policy, mandatory scenario, {args.feedback} feedback ({isolation})"
    console.print(summary_table(table4_metrics(records), statuses, title))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="run a scripted policy over ToolHop in the sandbox and print a Table 4-style summary"
    )
    parser.add_argument(
        "--data", default=None, help="ToolHop JSON or JSONL (default: $HOPGYM_DATA, cache, download)"
    )
    parser.add_argument("--limit", type=int, default=None, help="run only the first N tasks")
    parser.add_argument("--feedback", choices=("detailed", "minimal"), default="detailed")
    parser.add_argument("--sandbox", default="process", help="sandbox backend (process or docker)")
    parser.set_defaults(func=run)
