"""Sandbox performance and coverage on the real machine and the real ToolHop subset.

Measures: the warm ``call`` round trip through the sandbox alone (median of many; target <= 1 ms), the same
call through a fresh ``python -c`` per call (the ratio), worker pool start and per-episode ``load`` time, a
full pass over the tasks (load + one call per tool), peak RSS of host and workers, and how many of the
subset's tools load and gold calls run with and without ``policy="restricted"``.

Usage: ``HOPGYM_DATA=../shared/data python benchmarks/bench_sandbox.py [--isolation auto] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _timing import ARGUMENTS, TOOL, time_warm_calls

from hopgym.sandbox import make_sandbox
from hopgym.tasks.toolhop.loader import load_toolhop


def warm_round_trips(isolation: str, count: int) -> dict[str, float]:
    """Median and p90 of ``count`` warm calls, and the peak RSS of the worker processes afterwards."""
    with make_sandbox("process", isolation=isolation) as sandbox:
        figures = time_warm_calls(sandbox, count)
        worker_rss = worker_peak_rss_mb()
    return {**figures, "worker_peak_rss_mb": worker_rss}


def fresh_python_calls(count: int) -> dict[str, float]:
    code = f"import json\n{TOOL}print(json.dumps(lookup(**{ARGUMENTS!r})))"
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-c", code], check=True, capture_output=True)
        latencies.append((time.perf_counter() - started) * 1000)
    return {"median_ms": statistics.median(latencies), "calls": count}


def pool_start_and_loads(isolation: str, loads: int) -> dict[str, float]:
    started = time.perf_counter()
    sandbox = make_sandbox("process", isolation=isolation)
    start_ms = (time.perf_counter() - started) * 1000
    latencies = []
    with sandbox:
        for _ in range(loads):
            began = time.perf_counter()
            sandbox.load([TOOL])
            latencies.append((time.perf_counter() - began) * 1000)
            time.sleep(0.05)  # an episode's other work, during which the pool refills
    return {"first_worker_ms": start_ms, "load_median_ms": statistics.median(latencies), "loads": loads}


def full_pass(isolation: str, tasks: list) -> dict[str, float]:
    """Every task: load its tools, then call each once (with its gold arguments where known, else none)."""
    started = time.perf_counter()
    calls = 0
    with make_sandbox("process", isolation=isolation) as sandbox:
        for task in tasks:
            sandbox.load(task.tool_sources)
            gold = {call.name: call.arguments for call in task.gold_calls}
            for tool in task.tools:
                name = tool["function"]["name"]
                sandbox.call(name, gold.get(name, {}))
                calls += 1
    return {"seconds": time.perf_counter() - started, "tasks": len(tasks), "calls": calls}


def coverage(isolation: str, policy: str | None, tasks: list) -> dict[str, Any]:
    """How many tools load and how many gold calls return ``ok`` under ``policy``."""
    tools = loaded = gold = gold_ok = 0
    failures: list[str] = []
    with make_sandbox("process", isolation=isolation, policy=policy) as sandbox:
        for task in tasks:
            result = sandbox.load(task.tool_sources)
            tools += len(task.tool_sources)
            loaded += len(task.tool_sources) - len(result.errors)
            failures += [f"{task.id} load: {error}" for error in result.errors]
            for call in task.gold_calls:
                outcome = sandbox.call(call.name, call.arguments)
                gold += 1
                gold_ok += outcome.status == "ok"
                if outcome.status != "ok":
                    failures.append(f"{task.id} {call.name}: {outcome.error}")
    rows = sum(1 for task in tasks if task.gold_calls)
    return {
        "policy": policy or "none",
        "tools_loaded": loaded,
        "tools": tools,
        "gold_calls_ok": gold_ok,
        "gold_calls": gold,
        "gold_rows": rows,
        "failures": failures,
    }


def worker_peak_rss_mb() -> float:
    """The largest VmHWM among this process's Python descendants (the workers, below bwrap)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    family, frontier = set(), [os.getpid()]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        family.update(children)
        frontier = children
    peaks = []
    for pid in family:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if "python" in status.split("\n", 1)[0]:
            peaks += [
                int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")
            ]
    return max(peaks, default=0.0)


def host_peak_rss_mb() -> float:
    """ru_maxrss is in KiB on Linux."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isolation", default="auto")
    parser.add_argument("--calls", type=int, default=2000, help="warm round trips to time")
    parser.add_argument("--fresh-calls", type=int, default=30, help="fresh python -c calls to time")
    parser.add_argument("--out", help="also write the JSON figures to this file")
    args = parser.parse_args()

    tasks = load_toolhop()
    warm = warm_round_trips(args.isolation, args.calls)
    fresh = fresh_python_calls(args.fresh_calls)
    figures = {
        "isolation": make_sandbox("process", isolation=args.isolation, spares=0).isolation,
        "warm_call": warm,
        "fresh_python_call": fresh,
        "speedup_vs_fresh_python": fresh["median_ms"] / warm["median_ms"],
        "pool": pool_start_and_loads(args.isolation, 30),
        "full_pass": full_pass(args.isolation, tasks),
        "coverage": [coverage(args.isolation, policy, tasks) for policy in (None, "restricted")],
        "host_peak_rss_mb": host_peak_rss_mb(),
    }
    print(_table(figures))
    text = json.dumps(figures, indent=2)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")
    else:
        print(text)


def _table(figures: dict[str, Any]) -> str:
    warm, fresh, pool, full = (
        figures["warm_call"],
        figures["fresh_python_call"],
        figures["pool"],
        figures["full_pass"],
    )
    rows = [
        ("isolation", figures["isolation"]),
        (
            "warm call round trip, median",
            f"{warm['median_ms']:.3f} ms (p90 {warm['p90_ms']:.3f} ms, n={warm['calls']})",
        ),
        ("fresh `python -c` per call, median", f"{fresh['median_ms']:.1f} ms (n={fresh['calls']})"),
        ("ratio fresh / warm", f"{figures['speedup_vs_fresh_python']:.0f}x"),
        ("pool start (first worker ready)", f"{pool['first_worker_ms']:.0f} ms"),
        ("episode load (fresh worker), median", f"{pool['load_median_ms']:.1f} ms (n={pool['loads']})"),
        (
            "full pass (load + one call per tool)",
            f"{full['seconds']:.1f} s ({full['tasks']} tasks, {full['calls']} calls)",
        ),
    ]
    for cov in figures["coverage"]:
        rows.append(
            (
                f"policy={cov['policy']}: tools loaded / gold calls ok",
                f"{cov['tools_loaded']}/{cov['tools']} / {cov['gold_calls_ok']}/{cov['gold_calls']}"
                f" ({cov['gold_rows']} rows)",
            )
        )
    host, worker = figures["host_peak_rss_mb"], warm["worker_peak_rss_mb"]
    rows.append(("peak RSS host / one worker", f"{host:.0f} MB / {worker:.1f} MB"))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


if __name__ == "__main__":
    main()
