"""``hopgym rescore``: judge a run's saved answers again (another scorer or protocol rule), no model."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "rescore",
        help="recompute a run's metrics from its saved trajectories with another scorer or protocol",
        description="Reads RUN/episodes.jsonl, scores every ended episode's saved messages again, and "
        "writes a new run folder (episodes.jsonl, run.json, summary.json, summary.md). No model is called.",
    )
    parser.add_argument("run", type=Path, metavar="RUN", help="a run folder written by hopgym eval")
    parser.add_argument("--scorer", help="official | normalized (default: the run's)")
    parser.add_argument("--protocol", help="official | hopgym: whose answer rule (default: the run's)")
    parser.add_argument("--out", type=Path, required=True, help="the new run folder")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hopgym.agents.evaluation.rescore import rescore_run
    from hopgym.agents.evaluation.summary import markdown_table, run_title

    summary = rescore_run(args.run, args.out, args.scorer, args.protocol)
    print(f"{run_title(summary)}  ({args.out})\n")
    print(markdown_table({args.out.name: summary}))
    return 0
