"""``hopgym ablate feedback|frameworks|scenarios``: the paper's ablations, one eval run per arm.

Each ablation takes every option of ``hopgym eval`` (``commands/eval_arguments.py``: they cannot drift apart),
except the setting it varies. Arms go to ``OUT/<arm>``; the tables to ``OUT/ablation.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hopgym.commands.eval_arguments import add_eval_arguments, eval_config
from hopgym.commands.model_arguments import model_endpoint
from hopgym.errors import ConfigError

_VARIED_FLAG = {"feedback": "--feedback", "frameworks": "--agent", "scenarios": "--scenario"}


def register(subparsers: argparse._SubParsersAction) -> None:
    from hopgym.agents.evaluation.ablation import ABLATIONS
    from hopgym.agents.evaluation.feedback_flips import ERROR_SETS

    parser = subparsers.add_parser("ablate", help="the paper's feedback, framework and scenario ablations")
    ablations = parser.add_subparsers(dest="ablation", required=True, metavar="ABLATION")
    parent = argparse.ArgumentParser(add_help=False)
    add_eval_arguments(parent)
    for name, ablation in ABLATIONS.items():
        arms = ", ".join(ablation.arms)
        sub = ablations.add_parser(
            name,
            parents=[parent],
            help=f"runs the arms {arms}",
            description=f"Runs hopgym eval once per value of {ablation.setting} ({arms}) into "
            f"OUT/<value> and writes OUT/ablation.md. Takes hopgym eval's options except "
            f"{_VARIED_FLAG[name]}.",
        )
        sub.set_defaults(func=run, agent=None)
        if name == "feedback":
            sub.add_argument(
                "--error-set",
                choices=ERROR_SETS,
                default="invocation",
                help="which calls make a query count for Table 5: invocation errors (default) "
                "or any failed call",
            )


def run(args: argparse.Namespace) -> int:
    from hopgym.agents.evaluation.ablation import ABLATIONS, ablation_markdown, run_ablation
    from hopgym.agents.evaluation.records import EPISODES_FILE, read_episodes
    from hopgym.agents.evaluation.runner import run_verdict
    from hopgym.agents.evaluation.tracking import Tracker, log_run
    from hopgym.run_folder import write_text

    name = args.ablation
    setting = ABLATIONS[name].setting
    if getattr(args, setting) is not None:
        raise ConfigError(f"the {name} ablation varies {_VARIED_FLAG[name]}; do not pass it")
    trackers = [Tracker.parse(spec) for spec in args.track]
    for tracker in trackers:  # before the runs: a missing library must not cost them
        tracker.check_installed()
    out = Path(args.out) if args.out else Path("runs") / f"ablate-{name}"
    with model_endpoint(args) as endpoint:
        summaries = run_ablation(name, eval_config(args, endpoint, out, args.agent or "fc"))
    markdown = ablation_markdown(name, out, summaries, getattr(args, "error_set", "invocation"))
    write_text(out / "ablation.md", markdown)
    print(markdown)
    print(f"arms: {', '.join(str(out / arm) for arm in summaries)}")
    print(f"plots: hopgym report {' '.join(str(out / arm) for arm in summaries)} --out {out / 'report'}")
    status = 0
    for arm in summaries:  # each arm ends as its eval run would: the worst arm sets the exit status
        for line in log_run(out / arm, trackers):
            print(line)
        arm_status, verdict = run_verdict(read_episodes(out / arm / EPISODES_FILE))
        if verdict is not None:
            print(f"hopgym: {arm}: {'error: ' if arm_status else ''}{verdict}", file=sys.stderr)
        status = max(status, arm_status)
    return status
