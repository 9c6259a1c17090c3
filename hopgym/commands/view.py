"""``hopgym view RUN...``: a local web page over run folders (episodes filtered, transcripts, two runs
side by side), served on 127.0.0.1 until Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "view",
        help="browse run folders in a local web page",
        description="Serves a page on 127.0.0.1 over the given run folders: filter episodes by outcome, "
        "error type and hops, open one to read every turn and tool call, compare two runs on the same task. "
        "Prints the page's URL; Ctrl-C stops the server.",
    )
    parser.add_argument(
        "runs", nargs="+", type=Path, metavar="RUN", help="run folders written by hopgym eval"
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hopgym.agents.report.viewer import open_viewer

    with open_viewer(args.runs, args.port) as server:
        print(f"viewer: {server.url}  (Ctrl-C stops it)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C or SIGTERM: the normal way to stop it
            server.serve_forever()
    return 0
