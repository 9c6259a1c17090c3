"""A batch of episodes (a GRPO step's env share, the model's turns scripted) in process against through 1 and
2 ``hopgym serve env`` servers (``--env-url``: ``hopgym.serving.remote_rollouts``).

Run: ``HOPGYM_DATA=../shared/data .venv/bin/python benchmarks/bench_env_servers.py [--episodes 64]
[--concurrency 8] [--turns 2] [--rounds 3]`` (needs ``hopgym[serve]``). Prints one JSON object: for each side
(``in_process``, ``servers_1``, ``servers_2``) the batch's wall time (median over rounds), episodes per
second, and the median and p90 episode latency in ms (reset to end, the scripted policy's time included, a
few µs a turn). Sides alternate within each round, so the machine's drifting load falls on all of them; the
servers run on this machine, so with 2 cores they share the CPUs with this process (a real deployment puts
them on other machines: the figure here is the protocol's and the balancing's cost, not the scale-out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import percentile
from bench_serve import ENV_KWARGS, action, hopgym_server, serve, stop

from hopgym.serving.remote_rollouts import on_servers
from hopgym.serving.rollouts import Rollouts, RolloutsFactory


async def batch(
    make: RolloutsFactory, episodes: int, concurrency: int, turns: int
) -> tuple[float, list[float]]:
    """One warm-up batch, then the timed one: its wall time in s and each episode's latency in ms."""

    async def policy(observation: Mapping[str, Any], info: Mapping[str, Any]) -> Any:
        return action(observation, turns)

    rollouts = make("ToolHop-v0", {**ENV_KWARGS, "max_turns": turns + 1}, concurrency)
    await rollouts.start()
    try:
        await rollouts.run(policy, [{"index": i % 100} for i in range(concurrency)])
        started = time.perf_counter()
        results = await rollouts.run(policy, [{"index": i % 100} for i in range(episodes)])
        seconds = time.perf_counter() - started
    finally:
        await rollouts.close()
    assert all(result.error is None for result in results), [r.error for r in results if r.error]
    return seconds, [result.latency_ms for result in results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--turns", type=int, default=2, help="tool-call turns before the answer")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    servers = [serve(hopgym_server(args.concurrency, args.turns)) for _ in range(2)]
    urls = [url for _, url in servers]
    sides: dict[str, RolloutsFactory] = {
        "in_process": Rollouts,
        "servers_1": on_servers(urls[:1]),
        "servers_2": on_servers(urls),
    }
    walls: dict[str, list[float]] = {side: [] for side in sides}
    latencies: dict[str, list[float]] = {side: [] for side in sides}
    try:
        for _ in range(args.rounds):
            for side, make in sides.items():
                seconds, episode_ms = asyncio.run(batch(make, args.episodes, args.concurrency, args.turns))
                walls[side].append(seconds)
                latencies[side] += episode_ms
    finally:
        for process, _ in servers:
            stop(process)
    figures = {
        side: {
            "batch_s": round(statistics.median(walls[side]), 3),
            "episodes_per_s": round(args.episodes / statistics.median(walls[side]), 1),
            "episode_median_ms": round(statistics.median(latencies[side]), 2),
            "episode_p90_ms": round(percentile(latencies[side], 0.9), 2),
        }
        for side in sides
    }
    print(json.dumps({"settings": vars(args), **figures}, indent=2))


if __name__ == "__main__":
    main()
