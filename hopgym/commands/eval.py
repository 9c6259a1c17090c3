"""``hopgym eval``: run an agent and a model over an env's tasks and write the paper-style tables."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from hopgym.commands.eval_arguments import add_eval_arguments, eval_config
from hopgym.commands.model_arguments import model_endpoint


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="evaluate an agent and a model on an env's tasks",
        description="Plays an agent driven by a model through an env's tasks, every tool call in the "
        "sandbox, and scores each episode. Appends one JSON line per finished episode to OUT/episodes.jsonl "
        "and writes OUT/summary.json and OUT/summary.md (hopgym report and hopgym view read them). "
        "Example: hopgym eval --env ToolHop-v0 --model local --limit 3 --out runs/first",
    )
    add_eval_arguments(parser)
    parser.set_defaults(func=run)


def _default_out(args: argparse.Namespace) -> Path:
    parts = [args.env, args.agent, args.model, args.scenario]
    return Path("runs") / re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(p for p in parts if p))


def run(args: argparse.Namespace) -> int:
    from hopgym.agents.evaluation.records import EPISODES_FILE, read_episodes
    from hopgym.agents.evaluation.runner import EvalRun, run_verdict
    from hopgym.agents.evaluation.summary import markdown_table, run_title
    from hopgym.agents.evaluation.tracking import Tracker, log_run
    from hopgym.agents.report.paper_tables import paper_tables_for_run

    trackers = [Tracker.parse(spec) for spec in args.track]
    for tracker in trackers:  # before the run: a missing library must not cost the run
        tracker.check_installed()
    with model_endpoint(args) as endpoint:
        config = eval_config(args, endpoint, Path(args.out) if args.out else _default_out(args), args.agent)
        summary = EvalRun(config).run()
    print(f"\n{run_title(summary)}  ({config.out})\n")
    print(markdown_table({config.agent: summary}))
    for warning in summary.get("warnings", ()):
        print(f"hopgym: warning: {warning}", file=sys.stderr)
    tables = paper_tables_for_run(config.out)  # the env's paper layouts (FamilyTool's Tables 3 and 4/5)
    if tables:
        print(f"\n{tables}")
    for line in log_run(config.out, trackers):
        print(line)
    status, verdict = run_verdict(read_episodes(config.out / EPISODES_FILE))
    if verdict is not None:
        print(f"hopgym: {'error: ' if status else ''}{verdict}", file=sys.stderr)
    return status
