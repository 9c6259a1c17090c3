"""``hopgym tools generate --kg NAME``: (re)write the committed tools generated from a KG's relations."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from hopgym.errors import DataError


def register(subparsers: argparse._SubParsersAction) -> None:
    from hopgym.tasks.kg2tool.generated_tools import GENERATED_DIR, KNOWN_KGS

    parser = subparsers.add_parser("tools", help="tools generated from knowledge-graph relations")
    actions = parser.add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    generate = actions.add_parser("generate", help="write tools.json and tools.py for a KG")
    generate.add_argument("--kg", required=True, choices=KNOWN_KGS, help="which KG's relations to use")
    generate.add_argument(
        "--data", type=Path, help="the KG file (family) or folder (fb15k-237); default: $HOPGYM_DATA"
    )
    generate.add_argument("--out", type=Path, help=f"output folder (default: {GENERATED_DIR}/<kg>)")
    generate.add_argument(
        "--check", action="store_true", help="write nothing; fail unless the output folder is up to date"
    )
    generate.set_defaults(func=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    from hopgym.tasks.kg2tool.generated_tools import GENERATED_DIR, tools_for_kg, write_tools
    from hopgym.tasks.user_files import read_user_bytes

    out = args.out or GENERATED_DIR / args.kg
    tools = tools_for_kg(args.kg, args.data)
    if not args.check:
        for path in write_tools(tools, out):
            print(path)
        print(f"{len(tools)} tools for {args.kg}")
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        stale = [
            path.name
            for path in write_tools(tools, scratch)
            if not (out / path.name).exists()
            or read_user_bytes(out / path.name, "generated tools file") != path.read_bytes()
        ]
    if stale:
        raise DataError(f"{out}: {', '.join(stale)} differ from freshly generated tools; run without --check")
    print(f"{out}: up to date ({len(tools)} tools)")
    return 0
