"""One module per ``hopgym`` subcommand; each exposes ``register(subparsers)``."""

from __future__ import annotations

import argparse


def add_actions(
    subparsers: argparse._SubParsersAction, command: str, help: str
) -> argparse._SubParsersAction:
    """``hopgym COMMAND ACTION ...``: add the command and return the subparsers its actions are added to."""
    parser = subparsers.add_parser(command, help=help)
    return parser.add_subparsers(dest=f"{command}_action", required=True, metavar="ACTION")
