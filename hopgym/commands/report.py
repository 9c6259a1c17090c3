"""``hopgym report RUN...``: the summary tables of several run folders side by side."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hopgym.agents.evaluation.feedback_flips import ERROR_SETS


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="print the summaries of run folders side by side")
    parser.add_argument("runs", nargs="+", type=Path, help="run folders written by hopgym eval")
    parser.add_argument(
        "--out",
        type=Path,
        help="also write DIR/report.md with SVG and 300-dpi PNG figures (needs the 'report' extra)",
    )
    parser.add_argument(
        "--label",
        action="append",
        help="a run's name in tables and legends, once per run folder, in order (default: folder names)",
    )
    parser.add_argument(
        "--error-set",
        choices=ERROR_SETS,
        default="invocation",
        help="calls that make a query count in the feedback-flips table (default: invocation errors)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hopgym.agents.evaluation.provenance import comparison_warnings
    from hopgym.agents.evaluation.summary import markdown_table, run_title
    from hopgym.agents.report.markdown import load_run, run_labels

    summaries = {}
    for folder, name in zip(args.runs, run_labels(args.runs, args.label), strict=True):
        # Recomputed from the episodes, so an interrupted run reports what it has so far.
        run = load_run(folder, name)
        for skipped in run.skipped:
            print(f"warning: skipped a malformed record: {skipped}", file=sys.stderr)
        summaries[name] = run.summary
        print(f"{name}: {run_title(run.summary)}")
    provenance = {name: summary["run"].get("provenance") or {} for name, summary in summaries.items()}
    for warning in comparison_warnings(provenance):
        print(f"warning: {warning}")
    print()
    print(markdown_table(summaries))
    if args.out:
        from hopgym.agents.report.markdown import write_report

        print(f"\nreport: {write_report(args.runs, args.out, args.error_set, args.label)}")
    return 0
