"""``hopgym data download``: an env's data from its public source (pinned, sha256-checked)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hopgym.commands import add_actions


def register(subparsers: argparse._SubParsersAction) -> None:
    from hopgym.tasks.downloads import GITHUB_RAW, NAMES

    download = add_actions(subparsers, "data", "download the data of an env").add_parser(
        "download",
        help="fetch a dataset at its pinned revision, sha256-checked",
        description="Writes DIR/<dataset>/, the layout HOPGYM_DATA expects; without --to, the user cache, "
        "which the loaders read when HOPGYM_DATA is unset.",
    )
    download.add_argument("dataset", choices=NAMES)
    download.add_argument("--to", type=Path, help="the data folder (default: the user cache)")
    download.add_argument(
        "--base-url", default=GITHUB_RAW, help=f"a mirror of {GITHUB_RAW} for the GitHub-hosted datasets"
    )
    download.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hopgym.tasks.data_files import data_cache_root
    from hopgym.tasks.downloads import download_dataset

    root = args.to or data_cache_root()
    for path in download_dataset(args.dataset, root, args.base_url):
        print(path)
    return 0
