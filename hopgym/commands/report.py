"""``hopgym report RUN...``: the summary tables of several run folders side by side; with ``--paired``, the
paired comparison of two of them (B − A on the tasks both hold), with ``--json`` as JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hopgym.agents.evaluation.feedback_flips import ERROR_SETS
from hopgym.errors import ConfigError

if TYPE_CHECKING:
    from hopgym.agents.report.markdown import Run


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
    parser.add_argument(
        "--paired",
        action="store_true",
        help="compare exactly two runs, A B, on the tasks both hold: B - A with a 95%% bootstrap interval "
        "and a paired test per metric (needs the 'report' extra: scipy)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the runs' summaries (and the paired comparison) as one JSON object instead of tables",
    )
    parser.set_defaults(func=run)


def _paired(runs: list[Run]) -> dict[str, Any]:
    """The paired comparison of the second run (B) against the first (A); imports scipy."""
    from hopgym.agents.evaluation.pairing import compare_runs

    a, b = runs
    return {"a": a.name, "b": b.name, **compare_runs(a.records, b.records)}


def run(args: argparse.Namespace) -> int:
    from hopgym.agents.evaluation.provenance import comparison_warnings
    from hopgym.agents.evaluation.summary import markdown_table, run_title
    from hopgym.agents.report.markdown import load_run, run_labels
    from hopgym.run_folder import json_bytes

    if args.paired and len(args.runs) != 2:
        raise ConfigError(f"--paired compares exactly two run folders, A B; got {len(args.runs)}")
    runs = []
    for folder, name in zip(args.runs, run_labels(args.runs, args.label), strict=True):
        # Recomputed from the episodes, so an interrupted run reports what it has so far.
        run = load_run(folder, name)
        for skipped in run.skipped:
            print(f"warning: skipped a malformed record: {skipped}", file=sys.stderr)
        runs.append(run)
    summaries = {run.name: run.summary for run in runs}
    warnings = comparison_warnings({run.name: run.provenance for run in runs})
    paired = _paired(runs) if args.paired else None
    if args.json:  # stdout holds the JSON document alone
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        document = {"runs": summaries, "warnings": warnings, **({"paired": paired} if paired else {})}
        print(json_bytes(document, indent=2).decode())
    else:
        for run in runs:
            print(f"{run.name}: {run_title(run.summary)}")
        for warning in warnings:
            print(f"warning: {warning}")
        print()
        print(markdown_table(summaries))
        if paired:
            from hopgym.agents.report.paired_table import paired_markdown

            print()
            print(paired_markdown(paired, paired["a"], paired["b"]))
    if args.out:
        from hopgym.agents.report.markdown import write_report

        path = write_report(args.runs, args.out, args.error_set, args.label, paired)
        print(f"\nreport: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0
