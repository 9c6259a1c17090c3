"""``hopgym kg2tool sample|export``: KG2Tool tasks sampled from a KG, and instruction data made from them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hopgym.errors import DataError

if TYPE_CHECKING:
    from tqdm import tqdm

    from hopgym.tasks.kg2tool.assembly import KGSource
    from hopgym.tasks.kg2tool.task_file import KG2ToolTask


def register(subparsers: argparse._SubParsersAction) -> None:
    from hopgym.tasks.fol.sampler import DEFAULT_MAX_ANSWERS
    from hopgym.tasks.kg2tool.assembly import KG_NAMES
    from hopgym.tasks.kg2tool.export import EXPORT_FORMATS, RECORD_KINDS

    parser = subparsers.add_parser("kg2tool", help="KG2Tool: FOL tasks over a KG and instruction data")
    actions = parser.add_subparsers(dest="kg2tool_command", required=True, metavar="ACTION")

    sample = actions.add_parser("sample", help="sample FOL query tasks with answers and solution paths")
    sample.add_argument("--kg", required=True, choices=KG_NAMES)
    sample.add_argument("--patterns", default="all", help="comma-separated pattern names, or all (default)")
    sample.add_argument("--n", type=int, required=True, help="tasks per pattern")
    sample.add_argument("--seed", type=int, default=0)
    sample.add_argument("--max-answers", type=int, default=DEFAULT_MAX_ANSWERS, help="answer-set size cap")
    sample.add_argument("--data", type=Path, help="the KG's data folder (default: under $HOPGYM_DATA)")
    sample.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    sample.add_argument(
        "--refine-with",
        metavar="MODEL",
        help="reword each template query through this model (litellm provider string) with the paper's "
        "FOL translation prompt; the template is kept as query_template",
    )
    sample.add_argument("--api-base", help="base URL of the --refine-with model server")
    sample.add_argument("--api-key", help="API key of the --refine-with model server")
    sample.add_argument("--concurrency", type=int, default=8, help="--refine-with requests at once")
    sample.set_defaults(func=run_sample)

    export = actions.add_parser(
        "export", help="write instruction data (ShareGPT, Alpaca or OpenAI chat) from a task file"
    )
    export.add_argument("--tasks", type=Path, required=True, help="a file written by `hopgym kg2tool sample`")
    export.add_argument("--format", required=True, choices=EXPORT_FORMATS)
    export.add_argument(
        "--kinds",
        default=",".join(RECORD_KINDS),
        help=f"record kinds to write (default: all of {RECORD_KINDS})",
    )
    export.add_argument("--n-distractors", type=int, default=0, help="extra tools listed with each task")
    export.add_argument("--seed", type=int, default=0, help="seeds distractors and review corruptions")
    export.add_argument("--data", type=Path, help="the KG's data folder (default: under $HOPGYM_DATA)")
    export.add_argument("--out", type=Path, required=True, help="a .json file (one array) or JSON Lines")
    export.set_defaults(func=run_export)


def run_sample(args: argparse.Namespace) -> int:
    from hopgym.tasks.kg2tool.assembly import load_kg_source, parse_patterns, sample_tasks
    from hopgym.tasks.kg2tool.task_file import write_tasks

    source = load_kg_source(args.kg, args.data)
    tasks = sample_tasks(source, parse_patterns(args.patterns), args.n, args.seed, args.max_answers)
    if args.refine_with:
        tasks = refine_queries(tasks, source, args)
    count = write_tasks(tasks, args.out)
    print(f"{count} tasks over {args.kg} written to {args.out}")
    return 0


def refine_queries(tasks: list[KG2ToolTask], source: KGSource, args: argparse.Namespace) -> list[KG2ToolTask]:
    """The tasks with their queries reworded by ``--refine-with``; each task that kept its template query
    is reported."""
    from hopgym.agents.construction.kg2tool_refine import refine_queries as refine
    from hopgym.agents.evaluation.runner import run_to_completion
    from hopgym.agents.model.client import ModelClient, ModelConfig

    client = ModelClient(ModelConfig(args.refine_with, api_base=args.api_base, api_key=args.api_key))
    refined, problems = run_to_completion(refine(tasks, source, client, args.concurrency))
    for problem in problems:
        print(f"kept the template query of {problem}", file=sys.stderr)
    print(f"{len(tasks) - len(problems)} of {len(tasks)} queries reworded by {args.refine_with}")
    return refined


def _counting_tasks(records: Iterator[dict[str, Any]], bar: tqdm) -> Iterator[dict[str, Any]]:
    """``records`` as they are written, moving ``bar`` on at each new task (records come task by task)."""
    task = None
    for record in records:
        if record["task_id"] != task:
            task = record["task_id"]
            bar.update(1)
        yield record


def run_export(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from hopgym.tasks.kg2tool.assembly import load_kg_source, offered_tool_names
    from hopgym.tasks.kg2tool.export import export_records, write_export
    from hopgym.tasks.kg2tool.task_file import read_tasks

    tasks = read_tasks(args.tasks)
    kgs = sorted({task.kg for task in tasks})
    if len(kgs) != 1:
        raise DataError(f"{args.tasks} mixes tasks over several KGs ({kgs}); export one KG at a time")
    source = load_kg_source(kgs[0], args.data)
    documents = {tool.name: tool.openai_schema()["function"] for tool in source.tools}
    unknown = sorted({name for task in tasks for name in task.tool_names} - set(documents))
    if unknown:
        raise DataError(f"{args.tasks} calls tools that {kgs[0]} does not generate: {unknown[:5]}")

    def tools_for(task):  # the tools listed in the system prompt
        return [
            documents[name] for name in offered_tool_names(task, source.tools, args.n_distractors, args.seed)
        ]

    kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    records = export_records(tasks, args.format, tools_for, source.label, args.seed, kinds)
    with tqdm(total=len(tasks), unit="task", desc=f"{args.format} records", dynamic_ncols=True) as bar:
        count = write_export(_counting_tasks(records, bar), args.out)
    print(f"{count} {args.format} records from {len(tasks)} tasks written to {args.out}")
    return 0
