"""KGTool-v0 benchmark over FB15k-237: loading the KG into the sandbox, tool-call round trip, oracle episodes.

Figures: seconds to load the whole KG and its 477 tools into a sandbox worker (done once per sandbox),
the median and 95th-percentile round trip of one relation-tool call through the env (validation,
sandbox, feedback), and oracle episodes per second (every solution call replayed, then the answer).
Run from the repo root:

    HOPGYM_DATA=../shared/data .venv/bin/python benchmarks/bench_kgtool.py [--n 20] [--calls 2000] [--out F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from _timing import report

from hopgym.envs.kgtool.env import KGToolEnv
from hopgym.tasks.kg2tool.export import answer_text


def _call(name: str, arguments: dict) -> dict:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": function}],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="tasks sampled per pattern for the oracle episodes")
    parser.add_argument("--calls", type=int, default=2000, help="relation-tool calls timed one by one")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the JSON figures to this file")
    args = parser.parse_args(argv)

    env = KGToolEnv(kg="fb15k-237", n=args.n, seed=args.seed)
    started = time.perf_counter()
    env.reset(options={"index": 0})  # the first reset loads the KG into the sandbox
    load_seconds = time.perf_counter() - started

    task = env.tasks[0]
    first = task.solution[0]
    latencies = []
    for _ in range(args.calls):
        started = time.perf_counter()
        truncated = env.step(_call(first.name, first.arguments))[3]
        latencies.append((time.perf_counter() - started) * 1000)
        if truncated:  # max_turns reached: start the episode again
            env.reset(options={"index": 0})
    latencies.sort()

    started = time.perf_counter()
    for index, task in enumerate(env.tasks):
        env.reset(options={"index": index})
        for call in task.solution:
            env.step(_call(call.name, call.arguments))
        env.step(answer_text(task, env.source.label))
    episode_seconds = time.perf_counter() - started
    env.close()

    figures = {
        "sandbox_kg_load_s": round(load_seconds, 2),
        "call_round_trip_ms_median": round(statistics.median(latencies), 3),
        "call_round_trip_ms_p95": round(latencies[int(0.95 * (len(latencies) - 1))], 3),
        "oracle_episodes": len(env.tasks),
        "oracle_episodes_per_s": round(len(env.tasks) / episode_seconds, 1),
    }
    report(figures, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
