"""The ``hopgym`` command line: a thin dispatcher over one module per subcommand."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

from hopgym.errors import HopgymError, error_text, one_line

# Each module defines ``register(subparsers)`` adding its subcommand with ``set_defaults(func=...)``.
COMMAND_MODULES = (
    "hopgym.commands.demo",
    "hopgym.commands.eval",
    "hopgym.commands.serve",
    "hopgym.commands.report",
    "hopgym.commands.rescore",
    "hopgym.commands.view",
    "hopgym.commands.data",
    "hopgym.commands.sandbox",
    "hopgym.commands.tools",
    "hopgym.commands.kg2tool",
    "hopgym.commands.construct",
    "hopgym.commands.ablate",
    "hopgym.commands.train",
)


DESCRIPTION = """\
Gymnasium environments for multi-hop tool use by LLM agents: every tool call runs in a sandbox and every
episode is scored against a verifiable answer. Evaluate a model on ToolHop, FamilyTool, KGTool or your own
tasks, run the papers' ablations, serve envs to RL trainers, and train on their rewards.

example:
  hopgym eval --env ToolHop-v0 --model local --agent fc --limit 3 --out runs/first
  hopgym report runs/first
  hopgym COMMAND --help   (what a command does and its options)"""

DEBUG_HELP = "show the full traceback of an error (by default: one line naming its cause)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hopgym", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    for subparser in subparsers.choices.values():  # `hopgym eval ... --debug` works too
        subparser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    _describe(parser)
    return parser


def _describe(parser: argparse.ArgumentParser) -> None:
    """Each command's ``--help`` opens with what it does: its one-line help from its parent's list, where
    the command sets no longer description."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, subparser in action.choices.items():
                summary = summaries.get(name, "")
                if not subparser.description and summary:
                    subparser.description = f"{summary[0].upper()}{summary[1:]}."
                _describe(subparser)


def _stop_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C, so model servers and sandboxes started by a command are stopped
    (the default action would end the process without running any cleanup)."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
        # SIGINT stops a command however it was started: a shell starts a background command (``&``) of a
        # script with SIGINT ignored, and Python then leaves it so, which made ``kill -INT`` a no-op on a run.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        return int(args.func(args) or 0)
    except HopgymError as exc:
        if args.debug:
            raise
        print(f"hopgym: error: {one_line(str(exc), limit=2000)}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug, or a library's error we did not foresee: still one line
        if args.debug:
            raise
        cause = one_line(error_text(exc), limit=2000)
        print(f"hopgym: error: {cause} (--debug shows the traceback)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hopgym: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
