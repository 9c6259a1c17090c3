"""ToolHop-v0 through env.step: warm tool-call round trip, a full pass over the tasks, peak RSS.

Run: ``HOPGYM_DATA=../shared/data .venv/bin/python benchmarks/bench_env.py [--calls N] [--spares K]``.
Prints one JSON object. The full pass is reset + load + one call per offered tool for every task
(arguments built from each tool's schema, as the demo's scripted policy does); target <= 10 s for the
100-task subset on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

from hopgym.agents.policies.scripted import schema_arguments
from hopgym.envs.toolhop.env import ToolHopEnv
from hopgym.tasks.toolhop.task import Task


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "b", "type": "function", "function": function}],
    }


def warm_step_latencies(env: ToolHopEnv, calls: int) -> tuple[Task, list[float], list[float]]:
    """(the task, each ``env.step`` in ms, the sandbox's own latency of each) for ``calls`` steps of one
    valid call of a task's last gold tool, after 20 untimed ones."""
    task = next(t for t in env.tasks if t.gold_calls)
    env.reset(options={"task_id": task.id})
    gold = task.gold_calls[-1]
    action = _call(gold.name, gold.arguments)
    for _ in range(20):
        env.step(action)
    step_ms, sandbox_ms = [], []
    for _ in range(calls):
        started = time.perf_counter()
        _, _, _, _, info = env.step(action)
        step_ms.append((time.perf_counter() - started) * 1000)
        sandbox_ms.append(info["calls"][0]["latency_ms"])
    return task, step_ms, sandbox_ms


def warm_round_trip(env: ToolHopEnv, calls: int) -> dict[str, Any]:
    """Median wall time of ``env.step`` with one valid call, and the sandbox's own latency for it."""
    task, step_ms, sandbox_ms = warm_step_latencies(env, calls)
    return {
        "task_id": task.id,
        "tool": task.gold_calls[-1].name,
        "calls": calls,
        "env_step_median_ms": statistics.median(step_ms),
        "env_step_p90_ms": statistics.quantiles(step_ms, n=10)[-1],
        "sandbox_latency_median_ms": statistics.median(sandbox_ms),
    }


def full_pass(env: ToolHopEnv) -> dict[str, Any]:
    """Reset every task and call each offered tool once; wall time and call statuses."""
    statuses: dict[str, int] = {}
    started = time.perf_counter()
    for index in range(len(env.tasks)):
        observation, _ = env.reset(options={"index": index})
        for tool in observation["tools"]:
            name = tool["function"]["name"]
            question = env.tasks[index].question  # the official prompt has no separate question message
            _, _, _, _, info = env.step(_call(name, schema_arguments(tool, question)))
            status = info["calls"][0]["status"]
            statuses[status] = statuses.get(status, 0) + 1
    return {"tasks": len(env.tasks), "seconds": time.perf_counter() - started, "statuses": statuses}


def descendants(pid: int) -> list[int]:
    """Every process under ``pid``, from each of its threads' ``children`` in /proc (a worker started from a
    thread other than the main one is listed under that thread only)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += [int(child), *descendants(int(child))]
    return found


def workers_peak_rss_mb() -> float:
    """Largest VmHWM among live descendants (bwrap and sandbox workers).

    ``RUSAGE_CHILDREN`` is no use here: a forked child's maxrss starts at the parent's size.
    """
    peaks = []
    for pid in descendants(os.getpid()):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:  # exited meanwhile
            continue
        peaks += [int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")]
    return max(peaks, default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="warm calls to time")
    parser.add_argument("--spares", type=int, default=1, help="pre-started sandbox workers")
    parser.add_argument("--data", default=None)
    parser.add_argument("--out", help="also write the JSON figures to this file")
    args = parser.parse_args()
    options = {"spares": args.spares}
    with_budget = ToolHopEnv(data_path=args.data, max_turns=10**9, sandbox_options=options)
    try:
        result = {"isolation": with_budget.sandbox.isolation, "spares": args.spares}
        result["warm_round_trip"] = warm_round_trip(with_budget, args.calls)
        result["full_pass"] = full_pass(with_budget)
        result["peak_rss_mb"] = {
            "env_process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "live_worker_processes": workers_peak_rss_mb(),
        }
    finally:
        with_budget.close()
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
