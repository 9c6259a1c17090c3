"""``hopgym construct``: build a verified ToolHop-format dataset from multi-hop queries with a model."""

from __future__ import annotations

import argparse
from pathlib import Path

from hopgym.commands.model_arguments import concurrency_of, max_reply_bytes, model_argument, model_endpoint


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "construct",
        help="query-driven tool construction: documents, refinement and verified code per sub-question",
        description="Reads rows with a question, its answer and ordered sub_tasks ([sub-question, "
        "sub-answer] pairs; a ToolHop file works too), asks the model for each hop's tool document, refined "
        "document and code, verifies the code in the sandbox (retrying with the failure), and writes the "
        "verified rows to OUT as an official-format ToolHop JSON list and the per-stage report to OUT with "
        "suffix .report.json. Each finished row is appended to OUT with suffix .rows.jsonl at once, so "
        "--resume continues an interrupted construction without losing or redoing rows.",
    )
    parser.add_argument("--input", required=True, type=Path, help="JSONL or JSON list of query rows")
    parser.add_argument(
        "--model",
        type=model_argument,
        required=True,
        help="litellm provider string, or 'local' (embedded SmolLM2)",
    )
    parser.add_argument("--out", required=True, type=Path, help="dataset file to write (JSON list)")
    parser.add_argument(
        "--api-base", action="append", help="base URL of the model server; repeat for replicas of one model"
    )
    parser.add_argument("--api-key", help="API key for the model server")
    parser.add_argument("--limit", type=int, help="construct only the first N rows")
    parser.add_argument(
        "--concurrency", type=int, help="rows constructed at once (default: 4; 1 for the local model)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted construction of OUT, skipping finished rows",
    )
    parser.add_argument("--max-attempts", type=int, default=3, help="attempts per stage (default: 3)")
    parser.add_argument(
        "--sandbox", default="process", help="sandbox backend for verification (default: process)"
    )
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default: 0)")
    parser.add_argument("--max-tokens", type=int, help="cap on each reply's tokens")
    parser.add_argument(
        "--timeout",
        type=float,
        help="seconds one model request may take in all (default: as for eval)",
    )
    parser.add_argument(
        "--max-reply-bytes", type=int, help="the most bytes read of one model reply (default: 4 MiB)"
    )
    parser.add_argument("--max-retries", type=int, default=4, help="retries of a failed model request")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hopgym.agents.construction.pipeline import (
        ToolConstructor,
        construct_dataset,
        report_markdown,
        report_path,
        rows_path,
    )
    from hopgym.agents.model.client import ModelClient, ModelConfig
    from hopgym.errors import ConfigError
    from hopgym.sandbox import make_sandbox
    from hopgym.tasks.toolhop.construction_rows import read_query_rows

    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be at least 1, got {args.limit}")
    concurrency = concurrency_of(args, default=4)
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1, got {concurrency}")
    rows = read_query_rows(args.input, args.limit)
    with model_endpoint(args) as endpoint, make_sandbox(args.sandbox) as sandbox:
        settings = {
            "input": str(args.input),
            "model": args.model,
            "max_attempts": args.max_attempts,
            "temperature": args.temperature,
            "max_tokens": endpoint.get("max_tokens"),
            "sandbox": sandbox.isolation,
        }
        config = ModelConfig(
            **endpoint,
            temperature=args.temperature,
            max_retries=args.max_retries,
            max_reply_bytes=max_reply_bytes(args),
        )
        client = ModelClient(config)
        constructor = ToolConstructor(client, sandbox, max_attempts=args.max_attempts)
        report = construct_dataset(
            rows,
            constructor,
            args.out,
            settings,
            progress=not args.no_progress,
            concurrency=concurrency,
            resume=args.resume,
        )
    print(report_markdown(report))
    print(f"\ndataset: {args.out}\nreport: {report_path(args.out)}\nrows: {rows_path(args.out)}")
    return 0
