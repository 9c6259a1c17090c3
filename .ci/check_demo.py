"""Checks a `make demo` run folder and says where its trajectories are.

Usage: python .ci/check_demo.py RUN [--strict]. Always prints the episodes' tool calls by status and
where the trajectories are; fails when the folder holds no episode or every episode errored. With
--strict (CI) it also fails on any errored episode and on an episode without an `ok` tool call (one
that ran in the sandbox, returned a value and was scored): the demo exists to show a model's tool calls
at work.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from hopgym.agents.evaluation.records import EPISODES_FILE, EpisodeRecord, read_episodes


def problems(records: list[EpisodeRecord], strict: bool) -> list[str]:
    """What is wrong with the run's episode records (empty when the run passes)."""
    if not records:
        return ["the run holds no episode"]
    errored = [r for r in records if r.error]
    if len(errored) == len(records):
        return [f"every episode errored, e.g. {errored[0].task_id}: {errored[0].error}"]
    if not strict:
        return []
    found = [f"episode {r.task_id} errored: {r.error}" for r in errored]
    found += [
        f"episode {r.task_id} made no ok tool call (calls: {[c['status'] for c in r.calls]})"
        for r in records
        if not any(call["status"] == "ok" for call in r.calls)
    ]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run", type=Path)
    parser.add_argument("--strict", action="store_true")
    args = parser.parse_args()
    path = args.run / EPISODES_FILE
    records = read_episodes(path) if path.exists() else []
    statuses = Counter(call["status"] for record in records for call in record.calls)
    print(f"tool calls run in the sandbox, by status: {dict(statuses) or 'none'}")
    print(f"trajectories: {path} (one JSON line per episode: messages, calls, reward, error)")
    found = problems(records, args.strict)
    for problem in found:
        print(f"demo check failed: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
